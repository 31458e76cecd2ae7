# The page only: slim Python + requirements.txt (gradio, httpx, pydantic, plotly, ...).
# No vLLM, no torch: the model servers run in their own vLLM containers (docker-compose.yml).
#   docker build -f docker/Dockerfile.app -t specdemo-app:local .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# An unprivileged user runs the page; the code stays root-owned and read-only to it.
RUN groupadd --gid 10001 app && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin app

WORKDIR /app
# Requirements first: code edits do not reinstall them.
COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY app.py ./
COPY common/ ./common/
COPY demo/ ./demo/
COPY servers/ ./servers/
COPY presets/ ./presets/

# Saved races: a named volume mounts here and inherits this owner on first use. Gradio keeps its
# own state in .gradio/ under the working directory: the one writable folder in /app.
RUN mkdir -p /data/runs /app/.gradio && chown app:app /data/runs /app/.gradio

USER 10001:10001
# Listen on all interfaces inside the container; compose publishes the port on 127.0.0.1 only.
ENV SPECDEMO_UI_HOST=0.0.0.0 \
    SPECDEMO_UI_PORT=7860 \
    SPECDEMO_RUNS_DIR=/data/runs
EXPOSE 7860
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7860/', timeout=4)"]
CMD ["python", "app.py"]
