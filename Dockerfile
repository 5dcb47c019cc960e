# The minruntime service image: one image, every `minruntime` command (docker-compose.yml runs
# `migrate`, `processor` and `requeue-worker` from it). Details: docs/deployment.md.
# tests/unit/test_compose_service.py keeps this file in step with pyproject.toml and the CLI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY services ./services
COPY migrations ./migrations
# The same pins as the tested .venv. `minruntime migrate` looks for migrations/ beside the
# installed package's parent directory (MIGRATIONS_DIR in minruntime/store/migrate.py), which a
# non-editable install does not ship, so they are copied to the very path the code names.
RUN pip install -c constraints.txt . \
    && cp -r migrations "$(python -c 'from minruntime.store.migrate import MIGRATIONS_DIR; print(MIGRATIONS_DIR)')" \
    && python -c 'from minruntime.store.migrate import head_revision; assert head_revision()' \
    && rm -rf /src

RUN useradd --create-home --uid 10001 --user-group minruntime \
    && mkdir -p /var/lib/minruntime \
    && chown minruntime:minruntime /var/lib/minruntime
USER 10001:10001
WORKDIR /var/lib/minruntime

# Inside a container the metrics must listen on every interface to be published; the faust
# data directory must be writable by the non-root user.
ENV MINRUNTIME_METRICS_HOST=0.0.0.0 \
    MINRUNTIME_STATE_DIR=/var/lib/minruntime/processor
EXPOSE 9400 9401

ENTRYPOINT ["minruntime"]
CMD ["--help"]
