"""The PyTorch side of `prep bench dataloader`: a map-style dataset over our dataset model,
the per-worker decoder cache, the timing loop and the stress test.

Importing this package does not import torch; the modules that need it import it themselves.
"""
