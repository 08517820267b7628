"""Stages: plain functions over one unit of work (episodes or video files); no Dask here."""
