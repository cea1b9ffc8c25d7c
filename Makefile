# Chores. The README's two commands (scripts/demo, scripts/test) need nothing but Python and pip.
PY := .venv/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: setup run worker demo test test-pg services lint types fmt check-deploy lock

setup:  ## create .venv with the pinned dependencies
	scripts/bootstrap

run: setup  ## the web server only (development)
	$(PY) manage.py runserver

worker: setup  ## Celery worker with the beat scheduler (needs CELERY_BROKER_URL, e.g. redis://; scripts/demo runs the embedded one)
	.venv/bin/celery -A portal worker --beat --loglevel INFO

demo:  ## everything, with the demo data
	scripts/demo

test:  ## the suite on SQLite
	scripts/test

services:  ## install (Debian packages) and start PostgreSQL and Redis on 127.0.0.1
	scripts/services

test-pg: services  ## the suite on PostgreSQL and Redis
	DATABASE_URL=$(PG_URL) REDIS_URL=redis://127.0.0.1:6379/0 scripts/test

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

types: setup  ## mypy with django-stubs (pyproject.toml [tool.mypy])
	.venv/bin/mypy

fmt: setup
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

check-deploy: setup  ## Django's deploy checks with production-like variables
	PORTAL_MODE=production SECRET_KEY=$$(head -c 48 /dev/urandom | base64) DATABASE_URL=$(PG_URL) \
	  CELERY_BROKER_URL=redis://127.0.0.1:6379/0 ALLOWED_HOSTS=portal.example.com \
	  METRICS_TOKEN=$$(head -c 32 /dev/urandom | base64) NOTIFY_WEBHOOK_ALLOWED_HOSTS=hooks.slack.com \
	  $(PY) manage.py check --deploy --fail-level WARNING

lock: setup  ## re-lock requirements/*.txt (hash-pinned) after changing pyproject.toml or constraints.txt
	scripts/lock
