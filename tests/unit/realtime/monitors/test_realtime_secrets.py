"""The secrets scan as scanners find secrets (docs/realtime.md, "Safety of the signal"): every rule of
`secret_rules.RULES` has a sample, found in a decoded token stream and in `messages`; the forms the review missed
(credentials by context, webhook URLs, key bodies without armour, secrets split over lines, vendor tokens) are
each found; and 10,000 lines of the standard library and agent sessions built from this repository's own code hold
none."""

from __future__ import annotations

import base64
import functools
import json
import sysconfig
from pathlib import Path

import pytest

from composer_prime.realtime.monitors import pii
from composer_prime.realtime.monitors.pii import PIIConfig, Scrubber, find
from composer_prime.realtime.monitors.secret_rules import RULES
from composer_prime.realtime.records import SessionRecord
from tests.support.secret_samples import SECRETS
from tests.support.tokenizer import tiny_tokenizer

HEX = "0123456789abcdef"
ALNUM = "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"  # 32 characters, mixed case and digits
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
OPENSSH_BODY = (
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDc2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0cwAAAJgAAAAAAAAAAA\n"
)
SAMPLES = {
    **SECRETS,  # the first kinds (tests/support/secret_samples.py)
    # By context.
    "password_assignment": 'db_password = "Tr0ub4dor&3"',
    "basic_auth": "Authorization: Basic " + base64.b64encode(b"deploy:hunter2-prod").decode(),
    "docker_auth": '{"auths": {"registry.example.io": {"auth": "'
    + base64.b64encode(b"robot:Zx9-Qw8-Er7").decode()
    + '"}}}',
    "bearer_token": "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0' https://api.internal/v1",
    "netrc_password": "machine api.internal.io login deploy password Qz7-Lp2-Xk9",
    "pgpass_line": "db.internal:5432:app:deploy:Qz7Lp2Xk9",
    "curl_user": "curl -u deploy:Qz7Lp2Xk9 https://artifacts.internal/upload",
    "nuget_password": '<add key="ClearTextPassword" value="Qz7Lp2Xk9!" />',
    # By shape.
    "private_key_body": OPENSSH_BODY,
    "putty_key": "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none",
    "slack_webhook": "https://hooks.slack.com/services/T0AB1CD2E/B0FG3HI4J/" + ALNUM[:24],
    "discord_webhook": "https://discord.com/api/webhooks/112233445566778899/" + ALNUM * 2,
    "teams_webhook": "https://acme.webhook.office.com/webhookb2/1a2b3c4d-1a2b-1a2b-1a2b-1a2b3c4d5e6f@"
    "1a2b3c4d-1a2b-1a2b-1a2b-1a2b3c4d5e6f/IncomingWebhook/" + HEX * 2 + "/1a2b3c4d-1a2b-1a2b-1a2b-1a2b3c4d5e6f",
    "stripe_webhook_secret": "whsec_" + ALNUM,
    "azure_sas_token": "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r"
    "&se=2026-12-01T00:00:00Z&sig=Zk3Lq8Vb2Nm7Xc4Rt9Yw1Pa6Sd5Fg0Hj2Kl3Qw4Er5Ty%3D",
    "azure_ad_client_secret": "client_secret: abc1Q~" + ALNUM,
    "telegram_bot_token": "bot 1234567890:AAH" + ALNUM,
    "shopify_token": "shpat_" + HEX * 2,
    "mailgun_key": "key-" + HEX * 2,
    "atlassian_token": "ATATT3xFfGF0" + ALNUM * 2,
    "age_secret_key": "AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58],
    "twilio_key": "SK" + HEX * 2,
    # Drawn from gitleaks' rule list.
    "onepassword_token": "ops_eyJ" + ALNUM * 4,
    "adobe_client_secret": "p8e-" + ALNUM,
    "alibaba_access_key": "LTAI" + ALNUM[:20],
    "artifactory_key": "AKCp" + (ALNUM * 3)[:69],
    "bedrock_api_key": "ABSK" + ALNUM * 4,
    "clojars_token": "CLOJARS_" + (ALNUM * 2)[:60],
    "cloudflare_origin_ca_key": "v1.0-" + (HEX * 2)[:24] + "-" + (HEX * 10)[:146],
    "databricks_token": "dapi" + HEX * 2,
    "defined_networking_token": "dnkey-" + (ALNUM * 2)[:26] + "-" + (ALNUM * 2)[:52],
    "doppler_token": "dp.pt." + (ALNUM * 2)[:43],
    "duffel_token": "duffel_test_" + (ALNUM * 2)[:43],
    "dynatrace_token": "dt0c01." + ALNUM[:24] + "." + (ALNUM * 2)[:64],
    "easypost_token": "EZAK" + (ALNUM * 2)[:54],
    "facebook_page_token": "EAAM" + ALNUM * 4,
    "flutterwave_key": "FLWSECK_TEST-" + "abcdef0123456789" * 2 + "-X",
    "flyio_token": "fo1_" + (ALNUM * 2)[:43],
    "frameio_token": "fio-u-" + (ALNUM * 2)[:64],
    "grafana_token": "glsa_" + ALNUM + "_" + HEX[:8],
    "harness_key": "pat." + ALNUM[:22] + "." + ALNUM[:24] + "." + ALNUM[:20],
    "terraform_cloud_token": ALNUM[:14] + ".atlasv1." + (ALNUM * 2)[:64],
    "heroku_key": "HRKU-AA" + (ALNUM * 2)[:58],
    "infracost_token": "ico-" + ALNUM,
    "linear_key": "lin_api_" + (ALNUM * 2)[:40],
    "mailchimp_key": HEX * 2 + "-us21",
    "mapbox_secret_token": "sk.eyJ" + ALNUM * 2 + "." + ALNUM,
    "maxmind_key": ALNUM[:6] + "_" + ALNUM[:29] + "_mmk",
    "newrelic_key": "NRAK-" + "ABCDEFGHIJ0123456789KLMNOPQ",
    "notion_token": "ntn_" + "12345678901" + ALNUM + "abc",
    "octopus_deploy_key": "API-" + "ABCDEFGHIJ0123456789KLMNOP",
    "openshift_token": "sha256~" + (ALNUM * 2)[:43],
    "perplexity_key": "pplx-" + (ALNUM * 2)[:48],
    "planetscale_token": "pscale_tkn_" + ALNUM + "Zz",
    "postman_token": "PMAK-" + (HEX * 2)[:24] + "-" + (HEX * 3)[:34],
    "prefect_token": "pnu_" + (ALNUM * 2)[:36],
    "pulumi_token": "pul-" + (HEX * 3)[:40],
    "readme_token": "rdme_" + ("abc123xyz9" * 7),
    "rubygems_token": "rubygems_" + HEX * 3,
    "scalingo_token": "tk-us-" + (ALNUM * 2)[:48],
    "sendinblue_key": "xkeysib-" + HEX * 4 + "-" + ALNUM[:16],
    "sentry_token": "sntryu_" + HEX * 4,
    "settlemint_token": "sm_pat_" + ALNUM[:16],
    "shippo_token": "shippo_live_" + (HEX * 3)[:40],
    "sourcegraph_token": "sgp_" + HEX + "_" + (HEX * 3)[:40],
    "square_token": "sq0atp-" + ALNUM[:22],
    "typeform_token": "tfp_" + (ALNUM * 2)[:59],
    "vault_token": "hvs." + (ALNUM * 3)[:95],
    "intra42_secret": "s-s4t2ud-" + HEX * 4,
    "authress_key": "sc_abcde12.ab12.acc_abcdefghij12.abcdefghijklmnopqrstuvwxyz0123456789",
    # Personal data.
}
"""One made-up sample of each rule (the context it needs included)."""

FORMS = {
    "password in code": ("password_assignment", 'conn = connect(host="db", password="Qz7-Lp2-Xk9")'),
    "password in YAML": ("password_assignment", "database:\n  user: app\n  password: Qz7Lp2Xk9!\n"),
    "password in .env": ("password_assignment", "DB_HOST=db\nDB_PASSWORD=hunter2prod\n"),
    "password in INI": ("password_assignment", "[mysql]\nuser = app\npasswd = s3cr3t-Pw\n"),
    "URL with user:pass": ("url_password", "REDIS_URL=redis://:s3cr3tpass@cache:6379/0"),
    "ADO.NET connection string": (
        "password_assignment",
        '"Server=tcp:db.internal,1433;Database=app;User ID=sa;Password=hunter2prod;Encrypt=True;"',
    ),
    "JDBC URL": ("password_assignment", "jdbc:mysql://db.internal:3306/app?user=root&password=hunter2prod&ssl=true"),
    "Authorization: Basic": ("basic_auth", SAMPLES["basic_auth"]),
    "Docker config.json auth": ("docker_auth", SAMPLES["docker_auth"]),
    ".netrc line": ("netrc_password", "machine github.com\n  login octocat\n  password Qz7-Lp2-Xk9\n"),
    ".pgpass line": ("pgpass_line", "*:*:*:postgres:Qz7Lp2Xk9"),
    "Slack webhook URL": ("slack_webhook", SAMPLES["slack_webhook"]),
    "Discord webhook URL": ("discord_webhook", SAMPLES["discord_webhook"]),
    "Stripe whsec_": ("stripe_webhook_secret", SAMPLES["stripe_webhook_secret"]),
    "PuTTY key": ("putty_key", "PuTTY-User-Key-File-2: ssh-rsa\nPrivate-Lines: 14\nAAAAgQ..."),
    "OpenSSH key body without armour": ("private_key_body", OPENSSH_BODY),
    "RSA key body without armour": ("private_key_body", "MIIEpAIBAAKCAQEA" + ALNUM * 2 + "\n" + ALNUM * 2),
    "JWT split over lines": ("jwt", JWT[:60] + "\\\n" + JWT[60:100] + "\n    " + JWT[100:]),
    "password split over lines": ("password_assignment", 'password = ("Qz7-"\n            "Lp2-Xk9")'),
    "token split by +": ("github_token", 'token = "ghp_Ab3dEf6hIj9kLm" + \\\n    "2nOp5qRs8tUv1wXy4zAb7cDe"'),
    "Telegram bot token": ("telegram_bot_token", SAMPLES["telegram_bot_token"]),
    "Shopify token": ("shopify_token", SAMPLES["shopify_token"]),
    "Mailgun key": ("mailgun_key", "MAILGUN_API_KEY=key-" + HEX * 2),
    "Atlassian token": ("atlassian_token", SAMPLES["atlassian_token"]),
    "age secret key": ("age_secret_key", SAMPLES["age_secret_key"]),
    "Azure SAS": ("azure_sas_token", SAMPLES["azure_sas_token"]),
    "Twilio key": ("twilio_key", SAMPLES["twilio_key"]),
    "UK mobile number": ("phone_number", "call me on 07700 900123 after five"),
}
"""The forms an independent review found missed (issue 42), each with the rule that must find it."""


def test_every_rule_has_a_sample_and_the_scan_has_them_all():
    assert sorted(SAMPLES) == sorted(r.name for r in RULES) and len(RULES) >= 22 + 23 + 40 - 3
    assert len(FORMS) >= 23


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_rule_finds_its_sample_alone_and_in_prose(name):
    assert name in find(SAMPLES[name])
    assert name in find(f"ok, here it is:\n{SAMPLES[name]}\nthanks")


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_the_review_missed_is_found(form):
    kind, text = FORMS[form]
    assert kind in find(text), (form, find(text))
    assert kind in find(json.dumps({"path": "config/app.txt", "content": text}))  # a tool call's arguments


@functools.cache
def scrubber() -> Scrubber:
    return Scrubber(PIIConfig(tokenizer=tiny_tokenizer()))


def record(text: str, where: str) -> SessionRecord:
    ids = scrubber().tokenizer.encode(f"Sure, here is the fix.\n{text}\n" if where == "tokens" else "Sure.")
    return SessionRecord.model_validate(
        {
            "schema": "composer-session",
            "version": 1,
            "kind": "session",
            "session_id": "s",
            "policy_version": 0,
            "sampling": {"temperature": 1.0},
            "started_at": 1.0,
            "ended_at": 2.0,
            "user": "u-1",
            "branches": [{"segments": [{"token_ids": ids, "sampled": True, "logprobs": [-0.5] * len(ids)}]}],
            "messages": [{"role": "tool", "content": text}] if where == "messages" else [],
        }
    )


CASES = [(name, SAMPLES[name]) for name in sorted(SAMPLES)] + [FORMS[form] for form in sorted(FORMS)]


@pytest.mark.parametrize("where", ["tokens", "messages"])
def test_every_sample_and_form_drops_its_session_from_the_token_stream_or_messages(where):
    missed = []
    for kind, text in CASES:
        session, why = scrubber()(record(text, where))
        if session is not None or f":{kind}" not in why:
            missed.append((kind, text[:40], why))
    assert missed == [], missed


def stdlib_lines(count: int) -> list[str]:
    """`count` lines of the standard library's own modules (tests left out), in name order."""
    lines: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "test" in path.relative_to(sysconfig.get_paths()["stdlib"]).as_posix().lower():
            continue
        lines += path.read_text(errors="replace").splitlines()
        if len(lines) >= count:
            return lines[:count]
    return lines


def test_ten_thousand_lines_of_the_standard_library_hold_no_secret():
    lines = stdlib_lines(10_000)
    assert len(lines) == 10_000
    found = {}
    for i in range(0, len(lines), 100):
        text = "\n".join(lines[i : i + 100])
        if kinds := find(text):
            found[i] = kinds
    assert found == {}


def agent_sessions() -> list[str]:
    """Agent sessions over this repository's own library: a file read with a tool, edited with a JSON tool call
    (its text escaped), and a test run's output."""
    root = Path(pii.__file__).resolve().parents[2]
    sessions = []
    for path in sorted(root.rglob("*.py")):
        if path.name in ("secret_rules.py", "pii.py", "demo.py"):
            continue  # the rules' own expressions; the demo writes a session with an e-mail address on purpose
        source = path.read_text()
        call = json.dumps({"name": "edit", "arguments": {"path": str(path.relative_to(root)), "new": source[:2000]}})
        sessions.append(
            f"<|im_start|>user\nFix the failing test in {path.name}.<|im_end|>\n<|im_start|>assistant\n"
            f'<tool_call>{{"name": "read", "arguments": {{"path": "{path.name}"}}}}</tool_call><|im_end|>\n'
            f"<|im_start|>tool\n{source}<|im_end|>\n<|im_start|>assistant\n<tool_call>{call}</tool_call>\n"
            f"<|im_start|>tool\n$ python -m pytest -x -q\n.....F\nFAILED tests/test_{path.stem}.py::test_it - "
            "AssertionError: assert 3 == 4\n1 failed, 5 passed in 0.42s<|im_end|>"
        )
    return sessions


def test_agent_sessions_over_ordinary_code_hold_no_secret():
    sessions = agent_sessions()
    assert len(sessions) > 100
    assert {i: kinds for i, s in enumerate(sessions) if (kinds := find(s))} == {}


def test_an_ssh_remote_is_not_an_email_address():
    """`git@github.com:org/repo` (a clone URL, as README and `local/tree.py` hold) names a host's service user."""
    assert find("git clone git@github.com:PrimeIntellect-ai/verifiers.git") == []
    assert find("url.https://github.com/.insteadOf=git@github.com:") == []
    assert find("mail jane.doe@corp.io about it") == ["email"]
