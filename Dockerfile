# prep: one image for the client (`prep ...`), a Dask scheduler (`dask scheduler`) or a worker
# (`dask worker tcp://scheduler:8786`). Datasets are mounted at the same path on every container
# (a shared filesystem), e.g. -v /data:/data.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ffmpeg tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/prep
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY schemas ./schemas
COPY manifests ./manifests
COPY bench ./bench
RUN pip install --no-cache-dir -e . && prep --version

EXPOSE 8786 8787
ENTRYPOINT ["tini", "--"]
CMD ["prep", "--help"]
