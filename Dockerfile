# prep: one image for the client (`prep ...`), a Dask scheduler (`dask scheduler`) or a worker
# (`dask worker tcp://scheduler:8786`). Datasets are mounted at the same path on every container
# (a shared filesystem), e.g. -v /data:/data.
#
# prep is installed as a plain (non-editable) wheel, the same way as `pip install .`: its run-time data
# (schemas, the VLA landscape) travel inside the wheel (pipeline/data/ links to schemas/ and
# manifests/vla_landscape.toml, copied below so the links resolve). No torch: `prep bench dataloader`
# is for a training node (see bench/h200_check.sh).

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY manifests/vla_landscape.toml ./manifests/vla_landscape.toml
COPY pipeline ./pipeline
RUN pip wheel --no-cache-dir --no-deps -w /dist .

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ffmpeg tini \
 && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir /tmp/dist/lerobot_prep-*.whl \
 && rm -rf /tmp/dist \
 && cd / && prep --version \
 && python -c "from pipeline.schemas import load_schema; from pipeline.budget.landscape import load_landscape; load_schema('manifest'); load_landscape()"
COPY bench /opt/prep/bench
WORKDIR /work

EXPOSE 8786 8787
ENTRYPOINT ["tini", "--"]
CMD ["prep", "--help"]
