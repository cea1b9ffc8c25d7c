"""Settings for GPU Pool Portal, read from the environment (see .env.example).

Defaults work on a fresh clone: SQLite, the simulated cluster backend, Celery eager (no broker).
``PORTAL_MODE=production`` refuses to start unless the secret key, a PostgreSQL database, a broker
and the allowed hosts are set.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)
# Where the embedded mode keeps its files (development secret key, embedded broker, beat schedule, logs): the
# checkout's var/ unless PORTAL_VAR_DIR names another (the system tests run each portal in a directory of its own).
VAR_DIR = Path(env.str("PORTAL_VAR_DIR", default="") or BASE_DIR / "var")

PORTAL_MODE = env.str("PORTAL_MODE", default="development")
PRODUCTION = PORTAL_MODE == "production"
if PORTAL_MODE not in {"development", "production"}:
    raise ImproperlyConfigured(f"PORTAL_MODE must be 'development' or 'production', not {PORTAL_MODE!r}")


def _require_production_settings() -> None:
    """Refuse to start in production mode without the settings that have no safe default."""
    required = ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS")
    missing = [name for name in required if not env.str(name, "")]
    if missing:
        raise ImproperlyConfigured(f"PORTAL_MODE=production needs these environment variables: {', '.join(missing)}")
    if not env.str("DATABASE_URL").startswith(("postgres://", "postgresql://", "pgsql://")):
        raise ImproperlyConfigured("PORTAL_MODE=production needs a PostgreSQL DATABASE_URL (postgres://...)")


def _development_secret_key() -> str:
    """A random key kept in var/ so sessions survive restarts; never used in production."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


if PRODUCTION:
    _require_production_settings()

SECRET_KEY = env.str("SECRET_KEY", default="") or _development_secret_key()
DEBUG = env.bool("DEBUG", default=not PRODUCTION)
_LOCAL_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[] if PRODUCTION else _LOCAL_HOSTS)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "simple_history",
    "axes",
    "csp",
    "portal",
    "liveness",
    "pools",
    "queues",
    "clusters",
    "notify",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "portal.middleware.RejectNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.PrivateCacheMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "simple_history.middleware.HistoryRequestMiddleware",
    # Last: turns a sign-in refused for too many failures into the lockout page (429).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.site",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60 if PRODUCTION else 0))
# A kept connection is checked before a request uses it: after a database restart the first request reconnects
# instead of failing on the dead connection.
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the embedded worker share one SQLite file. WAL lets readers run beside the one writer;
    # every transaction starts IMMEDIATE, taking the write lock at BEGIN and waiting up to the busy timeout for it.
    # A deferred transaction that reads and then writes cannot wait: SQLite answers "database is locked" at once
    # when another connection wrote since its read began, whatever the timeout (docs/operations.md, Embedded mode).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": env.int("SQLITE_BUSY_TIMEOUT_SECONDS", default=30),
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sign-in lockout (django-axes; the portal's and the admin's sign-in pages): AXES_FAILURE_LIMIT failed sign-ins of
# one username from one address lock that pair out for AXES_COOLOFF_MINUTES (429, the right password included);
# a success before the limit forgets the failures.
# The sign-on backend is always listed: it does nothing unless OIDC_ENABLED and called by the sign-on callback, and
# it comes after axes's, so a locked-out address reaches no provider and a refused sign-on counts as a failure.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "portal.sso.backend.PortalOIDCBackend",
]
AXES_ENABLED = env.bool("AXES_ENABLED", default=True)
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# A spray (many usernames from one address) is slowed too: this many failures from one address, any usernames, within
# the cool-off lock the address (portal.signin_throttle; 0: off).
AXES_HANDLER = "portal.signin_throttle.AddressAwareHandler"
AXES_ADDRESS_FAILURE_LIMIT = env.int("AXES_ADDRESS_FAILURE_LIMIT", default=20)
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "kernel.net.client_ip"
# Proxies in front of the portal that append to X-Forwarded-For (deploy/: the Ingress and the nginx sidecar, 2);
# 0 reads REMOTE_ADDR only. The lockout and the API throttles key on the address these proxies saw.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
# The cache holds the API throttles' counts: local memory (per process) unless CACHE_URL names a shared one
# (redis://…, as in production, so that every web worker counts together).
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}
if CACHES["default"]["BACKEND"].endswith("RedisCache"):
    # A Redis that stops answering costs a request a second, not the kernel's TCP timeout (the API then answers 503).
    _cache_timeout = env.float("CACHE_SOCKET_TIMEOUT_SECONDS", default=1.0)
    CACHES["default"].setdefault("OPTIONS", {}).update(
        {"socket_connect_timeout": _cache_timeout, "socket_timeout": _cache_timeout}
    )


def _env_or(name: str, cast, default):
    """``cast(name)`` from the environment, or ``default`` when unset or empty (an empty line copied from
    .env.example must not turn PKCE or TLS verification off)."""
    return cast(name) if env.str(name, default="") else default


# Single sign-on with OpenID Connect (portal/sso/, docs/operations.md "Single sign-on"): on when OIDC_ISSUER and
# OIDC_CLIENT_ID are set. The endpoints come from the issuer's discovery document unless set here; ID tokens are
# checked for signature (the provider's JWKS), algorithm, issuer, audience, nonce and expiry. Local accounts stay.
OIDC_OP_ISSUER = env.str("OIDC_ISSUER", default="")
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_ENABLED = bool(OIDC_OP_ISSUER and OIDC_RP_CLIENT_ID)
OIDC_RP_SCOPES = env.str("OIDC_SCOPES", default="") or "openid email profile"
OIDC_RP_SIGN_ALGO = env.str("OIDC_SIGN_ALGORITHM", default="") or "RS256"
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_USERINFO_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_JWKS_ENDPOINT", default="")
# The button on the sign-in page says "Sign in with <this>".
OIDC_PROVIDER_NAME = env.str("OIDC_PROVIDER_NAME", default="") or "single sign-on"
# Claims other than "groups" that carry group names (an Okta authorization server's custom groups claim).
OIDC_EXTRA_GROUP_CLAIMS = env.list("OIDC_EXTRA_GROUP_CLAIMS", default=[])
OIDC_TOKEN_USE_BASIC_AUTH = _env_or("OIDC_TOKEN_USE_BASIC_AUTH", env.bool, False)  # client_secret_basic, else _post
OIDC_USE_PKCE = _env_or("OIDC_USE_PKCE", env.bool, True)
OIDC_USE_NONCE = True
OIDC_TIMEOUT = _env_or("OIDC_TIMEOUT_SECONDS", env.float, 10.0)
OIDC_VERIFY_SSL = _env_or("OIDC_VERIFY_SSL", env.bool, True)
OIDC_CLOCK_SKEW_SECONDS = _env_or("OIDC_CLOCK_SKEW_SECONDS", env.int, 60)
OIDC_DISCOVERY_CACHE_SECONDS = _env_or("OIDC_DISCOVERY_CACHE_SECONDS", env.int, 3600)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
if OIDC_ENABLED:
    if not (OIDC_RP_SIGN_ALGO.startswith(("RS", "ES")) and OIDC_RP_SIGN_ALGO[2:] in {"256", "384", "512"}):
        raise ImproperlyConfigured(f"OIDC_SIGN_ALGORITHM: {OIDC_RP_SIGN_ALGO!r} is not RS256/384/512 or ES256/384/512")
    if not OIDC_RP_CLIENT_SECRET:
        raise ImproperlyConfigured("OIDC_ISSUER and OIDC_CLIENT_ID are set: OIDC_CLIENT_SECRET is needed too")
    if "openid" not in OIDC_RP_SCOPES.split():
        raise ImproperlyConfigured(f"OIDC_SCOPES must include openid (it is {OIDC_RP_SCOPES!r})")
    if PRODUCTION and not OIDC_OP_ISSUER.startswith("https://"):
        raise ImproperlyConfigured("PORTAL_MODE=production needs an https:// OIDC_ISSUER")

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# Bearer token /metrics requires. Without one, /metrics answers 403 when METRICS_REQUIRE_TOKEN (the default in
# production: it shows every team's spend) and is open otherwise (development; or a production site that serves
# /metrics only on a network-restricted listener and says so with METRICS_REQUIRE_TOKEN=0). check --deploy warns.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_REQUIRE_TOKEN = _env_or("METRICS_REQUIRE_TOKEN", env.bool, PRODUCTION)

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "portal.staticfiles.PlotlyFinder",
]
STATIC_ROOT = env.path("STATIC_ROOT", default=BASE_DIR / "var" / "staticfiles")

# Security: strict in production, relaxed for the embedded default.
_BEHIND_TLS_PROXY = env.bool("BEHIND_TLS_PROXY", default=PRODUCTION)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if _BEHIND_TLS_PROXY else None
SESSION_COOKIE_SECURE = PRODUCTION
CSRF_COOKIE_SECURE = PRODUCTION
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=PRODUCTION)
# In-cluster Prometheus scrapes by pod IP over plain http (the endpoint has its own token): not redirected.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = PRODUCTION
SECURE_HSTS_PRELOAD = PRODUCTION
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): scripts only from the portal's own static files (no inline script, no
# eval: htmx, plotly.js and the pages' scripts run under it); styles from the portal plus inline style attributes
# and the <style> elements plotly.js adds for its charts; images from the portal and data: URIs (plotly's
# mode bar); nothing may frame the portal. CSP_REPORT_ONLY=1 sends it as Content-Security-Policy-Report-Only.
_CSP = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
if env.bool("CSP_REPORT_ONLY", default=False):
    CONTENT_SECURITY_POLICY_REPORT_ONLY = _CSP
else:
    CONTENT_SECURITY_POLICY = _CSP

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON only (a form or multipart body cannot say null, which several fields take), refusing deep nesting with
    # a 400 (queues.api.parsers).
    "DEFAULT_PARSER_CLASSES": ["queues.api.parsers.JSONParser"],
    # Throttles (queues/api/throttling.py): anonymous calls and invalid tokens by address, token calls by token,
    # session calls by user. A rate is "N/second|minute|hour|day"; empty turns that throttle off.
    "DEFAULT_THROTTLE_CLASSES": [
        "queues.api.throttling.AnonymousThrottle",
        "queues.api.throttling.TokenThrottle",
        "queues.api.throttling.SessionUserThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env.str("API_THROTTLE_ANON", default="30/min") or None,
        "bad_token": env.str("API_THROTTLE_BAD_TOKEN", default="10/min") or None,
        "token": env.str("API_THROTTLE_TOKEN", default="600/min") or None,
        "user": env.str("API_THROTTLE_USER", default="600/min") or None,
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Pool Portal API",
    "DESCRIPTION": "Resource classes, jobs, wait reasons, timelines, feasibility checks and reservations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # A reservation's state beside a job's: each its own enum in the schema.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "queues.models.Job.State",
        "ReservationStateEnum": "queues.models.reservations.Reservation.State",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "queues.api.schema.error_responses",
    ],
}

# Celery: eager (in-process) when no broker is configured, as in tests and one-off commands.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Beat writes its heartbeat from its loop and marks what it sends (liveness/): the loop never sleeps past a heartbeat.
CELERY_BEAT_SCHEDULER = "liveness.beat.HeartbeatScheduler"
# A lost broker is retried for ever (Celery's default gives up after 100 tries and the worker exits).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Tasks still running when the broker connection drops finish; an acks_late task's message goes back to the queue
# (Redis: after the visibility timeout) and runs again, which its idempotent body allows.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
if CELERY_BROKER_URL.startswith("filesystem://"):
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL: the filesystem:// broker is not supported: its reader can take a message the sender is "
        "still writing (JSONDecodeError, and the worker exits). Run scripts/demo, or scripts/embedded.py, which use "
        "the embedded broker (sqla+sqlite:///…, docs/operations.md), or a redis:// broker."
    )
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # kombu's Redis transport with the fix that keeps the worker up when it loses the broker while a message is
    # unacknowledged (portal/broker_safety.py; docs/operations.md, Worker reconnects). rediss:// takes its TLS
    # settings from the URL's ssl_* parameters, as kombu's own transport does.
    CELERY_BROKER_TRANSPORT = "portal.broker_safety:Transport"
    # Short socket timeouts: a broker that stops answering is noticed in seconds, not after the kernel's TCP timeout
    # (the worker then reconnects; a publish from the web fails fast and the job waits for the next sweep).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "socket_connect_timeout": env.float("BROKER_SOCKET_TIMEOUT_SECONDS", default=5.0),
        "socket_timeout": env.float("BROKER_SOCKET_TIMEOUT_SECONDS", default=5.0),
        "retry_on_timeout": True,
        "health_check_interval": 25,
    }
elif CELERY_BROKER_URL.startswith("sqla+sqlite://"):
    # The embedded broker (kombu's SQLAlchemy transport on a SQLite file of its own): a message is a row, written
    # and taken in transactions (never half-written); the sqlite driver waits up to 30 s for the file's write lock.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_args": {"timeout": 30}}
    # Deliver one message at a time: a message a worker has taken is not handed back if that worker is killed.
    CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# Liveness (liveness/, docs/operations.md "Liveness"): worker and beat write a heartbeat every HEARTBEAT_SECONDS;
# a component not heard from for HEARTBEAT_STALE_SECONDS is down (GET /status.json, the status page, the pages'
# "live data paused" note, the metrics). A periodic task is late when it starts PERIODIC_TASK_LATE_SECONDS after
# beat sent it (or expires unrun), overdue when it has not run for two of its intervals plus that margin.
HEARTBEAT_SECONDS = env.float("HEARTBEAT_SECONDS", default=15.0)
HEARTBEAT_STALE_SECONDS = env.float("HEARTBEAT_STALE_SECONDS", default=60.0)
PERIODIC_TASK_LATE_SECONDS = env.float("PERIODIC_TASK_LATE_SECONDS", default=60.0)
CELERY_BEAT_MAX_LOOP_INTERVAL = HEARTBEAT_SECONDS
# How long a web process waits for the broker when /status.json and /metrics check it.
BROKER_CHECK_TIMEOUT_SECONDS = env.float("BROKER_CHECK_TIMEOUT_SECONDS", default=2.0)

SIMULATOR_TICK_SECONDS = env.float("SIMULATOR_TICK_SECONDS", default=5.0)
#: How often the beat rolls the jobs' new wait reasons up (docs/waiting.md).
WAIT_ATTRIBUTION_SECONDS = env.float("WAIT_ATTRIBUTION_SECONDS", default=300.0)
# Reservations: a window's opening is pushed to its cluster this long before its start, so its borrowers are reclaimed
# (and checkpointed) before the first minute; the beat task that drives the windows' edges runs this often.
RESERVATION_LEAD_SECONDS = env.float("RESERVATION_LEAD_SECONDS", default=120.0)
RESERVATION_EDGE_SECONDS = env.float("RESERVATION_EDGE_SECONDS", default=30.0)
# How long a simulated job runs when it names no simulated runtime, and how long a checkpoint takes.
SIMULATED_DEFAULT_RUNTIME_SECONDS = env.int("SIMULATED_DEFAULT_RUNTIME_SECONDS", default=600)
SIMULATED_CHECKPOINT_SECONDS = env.int("SIMULATED_CHECKPOINT_SECONDS", default=10)
# Wait diagnoses: grants of quota the ETA replay looks ahead (queues.diagnosis_window); beyond, ETAs are extended.
DIAGNOSIS_REPLAY_ADMISSIONS = env.int("DIAGNOSIS_REPLAY_ADMISSIONS", default=2000)
# How often the simulated clusters' DCGM reports the activity of each held card (clusters.simulated_dcgm).
SIMULATED_DCGM_SECONDS = env.float("SIMULATED_DCGM_SECONDS", default=60.0)
# Device health (pools/health/, docs/health.md).
# dcgm-exporter endpoints scraped every HEALTH_SCRAPE_SECONDS (none: only import_health and the sweep feed health).
HEALTH_DCGM_ENDPOINTS = env.list("HEALTH_DCGM_ENDPOINTS", default=[])
HEALTH_SCRAPE_SECONDS = env.float("HEALTH_SCRAPE_SECONDS", default=30.0)
HEALTH_SCRAPE_TIMEOUT_SECONDS = env.float("HEALTH_SCRAPE_TIMEOUT_SECONDS", default=10.0)
# Networks the scrapes may reach (exporters run inside the cluster): the private ranges by default; loopback,
# link-local (cloud metadata) and the rest of the special-use ranges only when listed here (kernel.egress).
HEALTH_SCRAPE_ALLOWED_NETWORKS = _env_or(
    "HEALTH_SCRAPE_ALLOWED_NETWORKS", env.list, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"]
)
# Exporter host label → node name, where they differ (e.g. "ip-10-0-0-1=gpu-node-1").
HEALTH_NODE_MAP = env.dict("HEALTH_NODE_MAP", default={})
# Seconds between health sweeps (node conditions, inventory changes, repair tickets; kubernetes taints applied).
HEALTH_SWEEP_SECONDS = env.float("HEALTH_SWEEP_SECONDS", default=60.0)
# Guarantees (docs/admin.md): how often each cluster's effective quotas are checked against its healthy capacity
# and, in Kubernetes clusters, protected jobs' priorities raised or lowered.
GUARANTEES_SWEEP_SECONDS = env.float("GUARANTEES_SWEEP_SECONDS", default=30.0)
# Kubernetes nodes the portal may taint or cordon: every label must match (empty: the portal touches no node).
HEALTH_MANAGED_NODE_LABELS = env.dict("HEALTH_MANAGED_NODE_LABELS", default={})
# How a device-plugin GPU is kept off on a managed node: taint (default), cordon or none.
HEALTH_NODE_ACTION = env.str("HEALTH_NODE_ACTION", default="taint")
# Simulated clusters: whether burn-in validation jobs pass or fail (to rehearse the failure path).
HEALTH_SIMULATED_VALIDATION_OUTCOME = env.str("HEALTH_SIMULATED_VALIDATION_OUTCOME", default="pass")

# Inventory import guard (manage.py import_inventory, the kube sync's node relist): a complete listing that holds no
# Node, or would mark gone more than this share of the live nodes (one node may always go), is refused unless
# --allow-mass-removal; the kube sync keeps its last good state and marks itself stale.
INVENTORY_MAX_REMOVAL_SHARE = env.float("INVENTORY_MAX_REMOVAL_SHARE", default=0.2)

# Kubernetes clusters: a sync pass (watch deltas since the bookmarks; the `kube_watch` process gives the
# low latency), the quota configuration push with drift detection, and the reconciler.
KUBE_SYNC_INTERVAL_SECONDS = env.float("KUBE_SYNC_INTERVAL_SECONDS", default=60.0)
KUBE_PUSH_INTERVAL_SECONDS = env.float("KUBE_PUSH_INTERVAL_SECONDS", default=300.0)
KUBE_RECONCILE_INTERVAL_SECONDS = env.float("KUBE_RECONCILE_INTERVAL_SECONDS", default=900.0)
# The kubernetes backend (clusters/kube_sync, clusters/backends/k8s); each default is declared here only.
# HTTP client: timeouts, retries and their backoff.
KUBE_API_CONNECT_TIMEOUT = env.float("KUBE_API_CONNECT_TIMEOUT", default=5.0)
KUBE_API_READ_TIMEOUT = env.float("KUBE_API_READ_TIMEOUT", default=30.0)
KUBE_API_RETRIES = env.int("KUBE_API_RETRIES", default=4)
KUBE_API_BACKOFF_BASE = env.float("KUBE_API_BACKOFF_BASE", default=0.5)
KUBE_API_BACKOFF_MAX = env.float("KUBE_API_BACKOFF_MAX", default=8.0)
# In-cluster clusters: the directory holding the pod's ServiceAccount `token` and `ca.crt`.
KUBE_SERVICE_ACCOUNT_DIR = env.str("KUBE_SERVICE_ACCOUNT_DIR", default="/var/run/secrets/kubernetes.io/serviceaccount")
# List + watch.
KUBE_LIST_PAGE_SIZE = env.int("KUBE_LIST_PAGE_SIZE", default=500)
KUBE_WATCH_TIMEOUT_SECONDS = env.int("KUBE_WATCH_TIMEOUT_SECONDS", default=300)
KUBE_SYNC_WATCH_SECONDS = env.float("KUBE_SYNC_WATCH_SECONDS", default=5)
KUBE_SYNC_IDLE_SECONDS = env.float("KUBE_SYNC_IDLE_SECONDS", default=2.0)
KUBE_STALE_AFTER_SECONDS = env.int("KUBE_STALE_AFTER_SECONDS", default=300)
# Submission.
KUBE_FIELD_MANAGER = env.str("KUBE_FIELD_MANAGER", default="gpu-pool-portal")
KUBE_DELETE_PROPAGATION = env.str("KUBE_DELETE_PROPAGATION", default="Background")
KUBE_JOB_BACKOFF_LIMIT = env.int("KUBE_JOB_BACKOFF_LIMIT", default=0)
KUBE_JOB_TTL_SECONDS_AFTER_FINISHED = env.int("KUBE_JOB_TTL_SECONDS_AFTER_FINISHED", default=3600)
KUBE_TERMINATION_GRACE_SECONDS = env.int("KUBE_TERMINATION_GRACE_SECONDS", default=30)
KUBE_CHECKPOINT_GRACE_SECONDS = env.int("KUBE_CHECKPOINT_GRACE_SECONDS", default=300)
KUBE_RESUBMIT_AFTER_SECONDS = env.int("KUBE_RESUBMIT_AFTER_SECONDS", default=120)
# Protected work (docs/admin.md): the WorkloadPriorityClass a protected job's Workload is raised to while its
# protection holds (pushed with a value one above every portal priority class).
KUBE_PROTECTED_PRIORITY_CLASS = env.str("KUBE_PROTECTED_PRIORITY_CLASS", default="gpupool-protected")
# Development sessions are reached at https://<pod>.<domain>/ when set (an ingress controller serves the wildcard
# domain); empty: through ``kubectl port-forward``.
KUBE_SESSION_INGRESS_DOMAIN = env.str("KUBE_SESSION_INGRESS_DOMAIN", default="")
# The job page's log and events (read while a person waits): one attempt each, this read timeout, this many lines
# per pod and at most this many pods.
KUBE_RUN_READ_TIMEOUT = env.float("KUBE_RUN_READ_TIMEOUT", default=5.0)
JOB_LOG_TAIL_LINES = env.int("JOB_LOG_TAIL_LINES", default=50)
JOB_LOG_MAX_PODS = env.int("JOB_LOG_MAX_PODS", default=8)
# DCGM GPU utilisation samples (one per card and scrape) are kept this long for the job page.
GPU_UTIL_RETENTION_DAYS = env.int("GPU_UTIL_RETENTION_DAYS", default=35)
# Kueue's manager ConfigMap ("namespace/name", key controller_manager_config.yaml), read at each push to check the
# clusters' fair-sharing switch (deploy/base/rbac.yaml grants read access to this one only).
KUEUE_CONFIG_MAP = env.str("KUEUE_CONFIG_MAP", default="kueue-system/kueue-manager-config")
# On: each push adds to that Configuration the integrations and DeviceClass mappings the clusters' classes need and
# restarts Kueue's controller (this Deployment, in the ConfigMap's namespace); needs deploy/kueue-config-write's Role.
KUEUE_CONFIG_WRITE = env.bool("KUEUE_CONFIG_WRITE", default=False)
KUEUE_CONTROLLER_DEPLOYMENT = env.str("KUEUE_CONTROLLER_DEPLOYMENT", default="kueue-controller-manager")
# The drift admin's buttons run on the worker; the page waits this long for the answer (clusters.drift_replies).
KUBE_DRIFT_REPLY_SECONDS = env.float("KUBE_DRIFT_REPLY_SECONDS", default=20.0)
# Reconciliation.
KUBE_RECONCILE_REPORTS_KEPT = env.int("KUBE_RECONCILE_REPORTS_KEPT", default=50)
KUBE_DEAD_NODE_SECONDS = env.int("KUBE_DEAD_NODE_SECONDS", default=600)
# Lifecycle notifications (notify): how often the outbox is delivered, how long a burst is gathered into one digest,
# how long a send may take before another worker may retry it (a dead worker's), and what the digests say.
NOTIFY_DELIVER_SECONDS = env.float("NOTIFY_DELIVER_SECONDS", default=30.0)
NOTIFY_BATCH_SECONDS = env.int("NOTIFY_BATCH_SECONDS", default=20)
NOTIFY_LEASE_SECONDS = env.int("NOTIFY_LEASE_SECONDS", default=120)
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=6)
NOTIFY_WEBHOOK_TIMEOUT_SECONDS = env.float("NOTIFY_WEBHOOK_TIMEOUT_SECONDS", default=10.0)
NOTIFY_STALE_SECONDS = env.int("NOTIFY_STALE_SECONDS", default=86400)
NOTIFY_DIGEST_MAX_EVENTS = env.int("NOTIFY_DIGEST_MAX_EVENTS", default=2000)
NOTIFY_DIGEST_LINES = env.int("NOTIFY_DIGEST_LINES", default=25)
NOTIFY_FIRST_IN_LINE_SECONDS = env.int("NOTIFY_FIRST_IN_LINE_SECONDS", default=60)
NOTIFY_IDLE_MINUTES = env.int("NOTIFY_IDLE_MINUTES", default=30)
NOTIFY_IDLE_PERCENT = env.float("NOTIFY_IDLE_PERCENT", default=5.0)
# Idle GPUs are negotiated (queues.idle, docs/operations.md): a running job of a class with an idle window whose GPUs
# all stay under NOTIFY_IDLE_PERCENT busy for that window is warned; IDLE_GRACE_SECONDS later it is asked to
# checkpoint (where it has a checkpoint policy), then released. The scan runs every IDLE_SCAN_SECONDS.
IDLE_GRACE_SECONDS = env.int("IDLE_GRACE_SECONDS", default=1800)
IDLE_SCAN_SECONDS = env.float("IDLE_SCAN_SECONDS", default=60.0)
NOTIFY_PORTAL_URL = env.str("NOTIFY_PORTAL_URL", default="")
NOTIFY_KEEP_DAYS = env.int("NOTIFY_KEEP_DAYS", default=90)
# Hosts users' webhooks may point at (and their subdomains), e.g. hooks.slack.com,webhook.office.com; empty: any
# (check --deploy warns). Whatever the host, the worker connects only to public addresses (kernel.egress) unless the
# address is in NOTIFY_WEBHOOK_ALLOWED_NETWORKS (CIDRs, e.g. an internal Mattermost's 10.20.0.0/16; empty: none).
NOTIFY_WEBHOOK_ALLOWED_HOSTS = env.list("NOTIFY_WEBHOOK_ALLOWED_HOSTS", default=[])
NOTIFY_WEBHOOK_ALLOWED_NETWORKS = env.list("NOTIFY_WEBHOOK_ALLOWED_NETWORKS", default=[])
CELERY_BEAT_SCHEDULE = {
    "simulated-clusters-tick": {
        "task": "clusters.simulated_clusters_tick",
        "schedule": SIMULATOR_TICK_SECONDS,
        "options": {"expires": SIMULATOR_TICK_SECONDS},
    },
    "simulated-dcgm-sample": {
        "task": "clusters.simulated_dcgm_sample",
        "schedule": SIMULATED_DCGM_SECONDS,
        "options": {"expires": SIMULATED_DCGM_SECONDS},
    },
    "health-scrape": {
        "task": "clusters.health_scrape_endpoints",
        "schedule": HEALTH_SCRAPE_SECONDS,
        "options": {"expires": HEALTH_SCRAPE_SECONDS},
    },
    "health-sweep": {
        "task": "clusters.health_sweep",
        "schedule": HEALTH_SWEEP_SECONDS,
        "options": {"expires": HEALTH_SWEEP_SECONDS},
    },
    "guarantees-sweep": {
        "task": "clusters.guarantees_sweep",
        "schedule": GUARANTEES_SWEEP_SECONDS,
        "options": {"expires": GUARANTEES_SWEEP_SECONDS},
    },
    # Billing (docs/billing.md): meter allocations, roll usage up, check budgets.
    "billing-metering-sync": {
        "task": "billing.metering_sync",
        "schedule": 300.0,
        "options": {"expires": 300},
    },
    "billing-usage-rollup-pending": {
        "task": "billing.usage_rollup_pending",
        "schedule": 900.0,
        "options": {"expires": 900},
    },
    "billing-usage-rollup-day": {
        "task": "billing.usage_rollup_day",
        "schedule": crontab(hour=0, minute=30),
        "options": {"expires": 6 * 3600},
    },
    "billing-metering-full-sweep": {
        "task": "billing.metering_full_sweep",
        "schedule": crontab(hour=0, minute=15),
        "options": {"expires": 6 * 3600},
    },
    "billing-budgets-check": {
        "task": "billing.budgets_check",
        "schedule": 900.0,
        "options": {"expires": 900},
    },
    # Wait attribution (docs/waiting.md): the incremental rollup of the jobs' wait reasons.
    "wait-attribution-sync": {
        "task": "queues.wait_attribution_sync",
        "schedule": WAIT_ATTRIBUTION_SECONDS,
        "options": {"expires": WAIT_ATTRIBUTION_SECONDS},
    },
    "reservation-edges": {
        "task": "queues.reservation_edges",
        "schedule": RESERVATION_EDGE_SECONDS,
        "options": {"expires": RESERVATION_EDGE_SECONDS},
    },
    "reservation-unused-notices": {
        "task": "billing.reservation_unused_notices",
        "schedule": crontab(hour=7, minute=0),
        "options": {"expires": 6 * 3600},
    },
    "policy-previews-sweep": {
        "task": "queues.policy_previews_sweep",
        "schedule": 3600.0,
        "options": {"expires": 3600},
    },
    "policy-push-retry-due": {
        "task": "clusters.policy_push_retry_due",
        "schedule": 30.0,
        "options": {"expires": 30.0},
    },
    "kube-sync-clusters": {
        "task": "clusters.kube_sync_clusters",
        "schedule": KUBE_SYNC_INTERVAL_SECONDS,
        "options": {"expires": KUBE_SYNC_INTERVAL_SECONDS},
    },
    "kube-push-configs": {
        "task": "clusters.kube_push_configs",
        "schedule": KUBE_PUSH_INTERVAL_SECONDS,
        "options": {"expires": KUBE_PUSH_INTERVAL_SECONDS},
    },
    # Lifecycle notifications (docs/operations.md): deliver the outbox, scan for "first in line" and idle GPUs.
    "notify-deliver-pending": {
        "task": "notify.deliver_pending",
        "schedule": NOTIFY_DELIVER_SECONDS,
        "options": {"expires": NOTIFY_DELIVER_SECONDS},
    },
    "notify-scan": {
        "task": "notify.scan",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "queues-idle-scan": {
        "task": "queues.idle_scan",
        "schedule": IDLE_SCAN_SECONDS,
        "options": {"expires": IDLE_SCAN_SECONDS},
    },
    "kube-reconcile-clusters": {
        "task": "clusters.kube_reconcile_clusters",
        "schedule": KUBE_RECONCILE_INTERVAL_SECONDS,
        "options": {"expires": KUBE_RECONCILE_INTERVAL_SECONDS},
    },
    # Liveness: forget old heartbeats and the messages the embedded broker's workers took long ago.
    "liveness-prune": {
        "task": "liveness.prune",
        "schedule": 3600.0,
        "options": {"expires": 3600},
    },
}
# Pushing a saved policy change to its clusters: retries of an unreachable cluster back off exponentially.
POLICY_PUSH_BACKOFF_SECONDS = env.int("POLICY_PUSH_BACKOFF_SECONDS", default=30)
POLICY_PUSH_BACKOFF_MAX_SECONDS = env.int("POLICY_PUSH_BACKOFF_MAX_SECONDS", default=1800)
POLICY_PUSH_MAX_ATTEMPTS = env.int("POLICY_PUSH_MAX_ATTEMPTS", default=8)
# Policy history is read-only in the admin: reverting there would skip the what-if preview and the push.
SIMPLE_HISTORY_REVERT_DISABLED = True
# What-if previews replay this many days of recorded jobs unless the admin asks for another window.
WHATIF_DEFAULT_DAYS = env.int("WHATIF_DEFAULT_DAYS", default=14)
# Wall-clock budget of one what-if replay (seconds); past it the preview asks for a shorter window. Previews run
# on the Celery worker (two replays per cluster the change touches), so this is a worker slot's time, not a request's.
WHATIF_MAX_SECONDS = env.int("WHATIF_MAX_SECONDS", default=300)
# What-if previews (status rows with their results) are deleted this many days after they were asked for.
WHATIF_PREVIEW_KEEP_DAYS = env.int("WHATIF_PREVIEW_KEEP_DAYS", default=7)

# Billing: currency of rates that name none; time zone whose midnights cut billing days (default TIME_ZONE).
BILLING_CURRENCY = env.str("BILLING_CURRENCY", default="EUR").upper()
BILLING_TIME_ZONE = env.str("BILLING_TIME_ZONE", default="") or TIME_ZONE
try:
    ZoneInfo(BILLING_TIME_ZONE)
except (ValueError, ZoneInfoNotFoundError) as exc:
    raise ImproperlyConfigured(f"BILLING_TIME_ZONE: {BILLING_TIME_ZONE!r} is not an IANA time zone") from exc
if len(BILLING_CURRENCY) != 3 or not BILLING_CURRENCY.isalpha():
    raise ImproperlyConfigured(f"BILLING_CURRENCY: {BILLING_CURRENCY!r} is not a 3-letter ISO 4217 code")
# Mail (budget alerts): printed to the console in development, SMTP (EMAIL_HOST…) in production.
_MAIL_BACKEND = "smtp" if PRODUCTION else "console"
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default=f"django.core.mail.backends.{_MAIL_BACKEND}.EmailBackend")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="GPU Pool Portal <gpu-portal@localhost>")

# Cluster backends.
PORTAL_DEFAULT_BACKEND = env.str("PORTAL_DEFAULT_BACKEND", default="simulated")
MAX_RESOURCE_CLASSES_ADVISED = env.int("MAX_RESOURCE_CLASSES_ADVISED", default=12)
# A demo installation lists its logins on the sign-in page (scripts/demo turns it on).
SHOW_DEMO_LOGINS = env.bool("SHOW_DEMO_LOGINS", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
