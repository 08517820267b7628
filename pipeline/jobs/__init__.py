"""Jobs: each one file with four parts, plan (dataset -> units, lazily), stage (a pure function of
pipeline.stages), reduce (incremental totals, rows streamed to disk) and publish (atomic writes, the
file that says complete last). They run through one engine session (pipeline.runner) and are the
Python API of prep:

    from pipeline.runner import RunConfig, open_engine
    from pipeline.jobs.scan import scan_dataset
    with open_engine(RunConfig(workers=2)) as engine:
        manifest, table = scan_dataset(Path("merged"), Path("m.json"), engine)
"""
