# Chores. The README's two commands (scripts/demo, scripts/test) need nothing but Python and pip.
PY := .venv/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: setup run worker demo test test-pg lint fmt check-deploy lock

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

test-pg:  ## the suite on PostgreSQL
	DATABASE_URL=$(PG_URL) scripts/test

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

fmt: setup
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

check-deploy: setup  ## Django's deploy checks with production-like variables
	PORTAL_MODE=production SECRET_KEY=$$(head -c 48 /dev/urandom | base64) DATABASE_URL=$(PG_URL) \
	  CELERY_BROKER_URL=redis://127.0.0.1:6379/0 ALLOWED_HOSTS=portal.example.com \
	  $(PY) manage.py check --deploy --fail-level WARNING

lock: setup  ## re-pin constraints.txt after changing pyproject.toml
	$(PY) -m pip install --quiet -c constraints.txt -r var/requirements.txt
	$(PY) -m pip freeze > constraints.txt
