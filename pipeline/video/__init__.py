"""Video probing, resizing and encoding (PyAV and the ffmpeg command line)."""
