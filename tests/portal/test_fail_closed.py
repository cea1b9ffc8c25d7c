"""Production fails closed (issue 33, findings 4 and 5): /metrics needs a token, ``check --deploy`` warns on a
missing metrics token, an empty webhook allow-list and insecure single sign-on settings, and in production the
provider's discovered endpoints must be https://. The deploy checks run as CI runs them: ``manage.py check --deploy
--fail-level WARNING`` in a subprocess with production variables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from portal.sso.provider import ProviderUnavailable, provider_endpoints
from tests.deploy_check import REPO, deploy_check
from tests.portal.oidc_provider import LocalOIDCProvider

PRODUCTION = {
    "PORTAL_MODE": "production",
    "ALLOWED_HOSTS": "gpus.example.com",
    "NOTIFY_WEBHOOK_ALLOWED_HOSTS": "hooks.slack.com,webhook.office.com",
}
SECRETS = {
    "SECRET_KEY": "k" * 20 + "ZyXwVuTsRqPoNmLkJiHgFeDcBa0123456789-_abcdefgh",
    "DATABASE_URL": "postgres://portal:pw@db.example.com:5432/portal",
    "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
    "METRICS_TOKEN": "m" * 8 + "3f9c1e7a2b8d4c6e0a5f1b9d7c3e",
}
OIDC = {
    "OIDC_ISSUER": "https://sso.example.com/realms/research",
    "OIDC_CLIENT_ID": "gpu-pool-portal",
    "OIDC_CLIENT_SECRET": "s3cret",
}


def _warnings(tmp_path, config: dict, secrets: dict) -> str:
    proc = deploy_check(config, secrets, static_root=tmp_path / "static")
    return proc.stdout + proc.stderr if proc.returncode else ""


def test_the_deploy_check_passes_a_production_configuration_that_fails_closed(tmp_path):
    assert _warnings(tmp_path, PRODUCTION, SECRETS) == ""
    assert _warnings(tmp_path, {**PRODUCTION, **OIDC}, SECRETS) == ""


def test_no_metrics_token_is_a_warning(tmp_path):
    out = _warnings(tmp_path, PRODUCTION, {k: v for k, v in SECRETS.items() if k != "METRICS_TOKEN"})
    assert "(portal.W001) METRICS_TOKEN is not set: /metrics answers 403 to every scrape" in out
    out = _warnings(tmp_path, {**PRODUCTION, "METRICS_REQUIRE_TOKEN": "0"},
                    {k: v for k, v in SECRETS.items() if k != "METRICS_TOKEN"})  # fmt: skip
    assert "/metrics is open to anyone who reaches it" in out
    assert "(portal.W002)" in _warnings(tmp_path, PRODUCTION, {**SECRETS, "METRICS_TOKEN": "short"})


def test_no_webhook_allow_list_is_a_warning(tmp_path):
    out = _warnings(tmp_path, {**PRODUCTION, "NOTIFY_WEBHOOK_ALLOWED_HOSTS": ""}, SECRETS)
    assert "(portal.W003) NOTIFY_WEBHOOK_ALLOWED_HOSTS is empty" in out


def test_insecure_single_sign_on_settings_are_warnings(tmp_path):
    insecure = {
        **PRODUCTION,
        **OIDC,
        "OIDC_VERIFY_SSL": "0",
        "OIDC_TOKEN_ENDPOINT": "http://sso.example.com/token",
        "OIDC_JWKS_ENDPOINT": "http://sso.example.com/certs",
        "OIDC_USE_PKCE": "0",
    }
    out = _warnings(tmp_path, insecure, SECRETS)
    assert "(portal.W004) OIDC_VERIFY_SSL is off" in out
    assert "(portal.W005) OIDC_OP_TOKEN_ENDPOINT, OIDC_OP_JWKS_ENDPOINT: http://" in out
    assert "(portal.W006) OIDC_USE_PKCE is off" in out


def test_bad_egress_settings_are_errors_in_every_mode(tmp_path):
    proc = deploy_check({"NOTIFY_WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/33", "HEALTH_DCGM_ENDPOINTS": "http://[::1"}, {},
                        static_root=tmp_path / "static")  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "(portal.E001) NOTIFY_WEBHOOK_ALLOWED_NETWORKS: '10.0.0.0/33' is not an IP network" in out
    assert "(portal.E002) HEALTH_DCGM_ENDPOINTS: 'http://[::1'" in out


@pytest.mark.django_db
def test_metrics_without_a_token_are_refused_where_one_is_required(client, settings):
    """Production's default (METRICS_REQUIRE_TOKEN): no token configured is no scrape for anyone, not an open door."""
    settings.METRICS_TOKEN = ""
    settings.METRICS_REQUIRE_TOKEN = True
    response = client.get("/metrics")
    assert response.status_code == 403
    assert b"set METRICS_TOKEN" in response.content
    assert b"portal_budget" not in response.content
    settings.METRICS_TOKEN = "a-long-random-metrics-token-0123456789"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}").status_code == 200


def test_production_settings_require_the_metrics_token_by_default():
    """The setting's default follows PORTAL_MODE (read in a fresh interpreter, as a process starts)."""
    code = "import portal.settings as s; print(s.METRICS_REQUIRE_TOKEN)"
    env = {"PATH": "/usr/bin:/bin", **PRODUCTION, **SECRETS}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    dev = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert dev.stdout.strip() == "False"


@pytest.mark.django_db
def test_discovered_http_endpoints_are_refused_in_production(settings):
    with LocalOIDCProvider() as provider:
        settings.OIDC_ENABLED = True
        settings.OIDC_OP_ISSUER = provider.issuer
        settings.OIDC_RP_CLIENT_ID = provider.client_id
        settings.OIDC_RP_CLIENT_SECRET = provider.client_secret
        assert provider_endpoints().token.startswith("http://")  # development: a local provider is fine
        settings.PORTAL_MODE = "production"
        with pytest.raises(ProviderUnavailable, match="is not https://"):
            provider_endpoints()
