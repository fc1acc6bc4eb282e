"""What the secrets scan looks for (`pii.py` runs it): one `Rule` per kind, an expression and, where the shape alone
is not enough, a check of what it matched (the vendor rules follow gitleaks' list, github.com/gitleaks/gitleaks,
config/gitleaks.toml).

Three families:

- **by context** (`CONTEXT`): a value assigned to a password-like key in code, a config file, a connection string
  or a URL query; `Authorization: Basic` and Docker's `"auth"` decoded to `user:password`; `.netrc` and `.pgpass`
  lines; `curl -u`; a NuGet `ClearTextPassword`. A value is a secret only when it looks like one (`looks_secret`):
  not an identifier, an expression, an empty or templated string or a placeholder;
- **by shape** (`SHAPES`): vendor tokens whose prefix names them (a table drawn from gitleaks' rule list), webhook
  URLs, private keys with or without their armour, JWTs (also broken over lines);
- **personal data** (`PERSONAL`): e-mail addresses, phone numbers (a UK mobile in its national form too), SSNs.

`pii.py` compiles every rule into one automaton (hyperscan, in prefilter mode: a superset of each rule's matches) and
runs a rule's own expression, and its check, only on a text the automaton says it may match. Every rule has a
sample in tests/unit/realtime/monitors/test_realtime_secrets.py.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """`pattern` is compiled with `re.ASCII`: `\\w`, `\\d`, `\\s` and `\\b` mean what they mean to hyperscan."""

    name: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None
    """A match is a finding only when this holds (the value looks like a secret, a blob decodes to credentials)."""
    locator: str | None = None
    """For a rule whose expression starts on common letters: a hyperscan expression (no look-arounds or
    back-references) whose matches end wherever the rule's may; the rule then runs only in the `span` characters
    before each such end, not over the whole text."""
    span: int = 0
    """The longest match of the rule (with a `locator`)."""


def rule(name: str, pattern: str, check=None) -> Rule:
    return Rule(name, re.compile(pattern, re.ASCII), check)


PLACEHOLDERS = re.compile(
    r"example|sample|dummy|fake|placeholder|changeme|change_me|redacted|xxxx|\*\*\*|\.\.\.|your[_-]|<|>|\{|\}|\$|%s|%\(",
    re.I,
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_]*(?:[.-][A-Za-z_]+)*")
"""Letters, `_`, and `.`/`-` between words, no digit: a name or an attribute path (`self.password`, `access_token`,
`not-a-real-secret`), never a credential."""
NAME = re.compile(r"[A-Za-z_]\w*(?:\.\w+)*")


def looks_secret(value: str) -> bool:
    """A value worth a finding: 6-200 characters, no space, not a placeholder or a template, not a bare name."""
    return 6 <= len(value) <= 200 and not PLACEHOLDERS.search(value) and not IDENTIFIER.fullmatch(value)


def _mixed(value: str) -> bool:
    return any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)


NOUN = (
    r"(?P<noun>[PpSsTtAaCc](?i:ass(?:word|wd|wort|phrase)?|wd|ecret|oken|pi[_-]?key|ccess[_-]?key|rivate[_-]?key"
    r"|uth[_-]?key|uth|redentials?|lient[_-]?secret))"
)
"""The noun that ends a password-like key (`db_password`, `GITHUB_TOKEN`, `apiKey`; not `max_tokens`). The
expression starts on a narrow class so Python's engine skips ahead fast; `_assignment` checks the key's boundary."""
ASSIGNMENT = re.compile(
    NOUN + r"[\"']?[ \t]{0,16}(?P<op>:=|=>|==|=|:)[ \t]{0,16}\(?[ \t]{0,16}"
    r"(?:[rbuf]?(?P<q>[\"'`])(?P<quoted>[^\"'`\s]{6,200})(?P=q)"
    r"|(?P<bare>[^\s\"'`,;&)\]}<>(\[{]{6,200})(?=[\s;&,)\]}\"']|$))",
    re.M | re.ASCII,
)


LOCATOR = (
    NOUN.replace("(?P<noun>", "(?:") + r"[\"']?[ \t]{0,16}(?::=|=>|==|=|:)[ \t]{0,16}\(?[ \t]{0,16}"
    r"(?:[rbuf]?(?:\"[^\"'`\s]{6,}\"|'[^\"'`\s]{6,}'|`[^\"'`\s]{6,}`)|[^\s\"'`,;&)\]}<>(\[{]{6,}(?:[\s;&,)\]}\"']|$))"
)
"""`ASSIGNMENT` as hyperscan reads it exactly: the back-reference spelled out, the bound of the value dropped and
the look-ahead after a bare value consumed (so it ends at most one character past wherever `ASSIGNMENT` can, once
per value rather than at each of its characters)."""
KEY_HEAD = re.compile(r"(?:export[ \t]+)?[\"']?[\w.-]*$")
"""What may precede the noun in the key (`export DB_`, `"client.`)."""
CONFIG_REST = re.compile(r"[ \t]*(?:[#;].*)?\r?")
"""What may follow a value that ends a config line: nothing, or a comment."""


def _assignment(m: re.Match[str]) -> bool:
    before = m.string[m.start() - 1] if m.start() else " "
    if before.isalnum() and not (m["noun"][0].isupper() and (before.islower() or before.isdigit())):
        return False  # inside a word (`bypass`, `compass`); camelCase (`dbPassword`) still ends a key
    if m["op"] == "==":
        return False  # a comparison, not an assignment
    if m["quoted"] is not None:
        return looks_secret(m["quoted"])
    value = m["bare"]
    if not looks_secret(value):
        return False
    # A bare value counts in a connection string (`;Password=...;`, `?password=...&`) and in a config line
    # (`.env`, YAML, INI: the key starts the line and the value ends it); in code only when it mixes case and digits
    # (`-signal * ratio` is an expression, `settings.TOKEN` a name).
    prefix = m.string[m.string.rfind("\n", 0, m.start()) + 1 : m.start()]
    head = KEY_HEAD.search(prefix)
    end = m.string.find("\n", m.end())
    rest = m.string[m.end() : end if end >= 0 else len(m.string)]
    if prefix[head.start() - 1 : head.start()] in (";", "?", "&") or rest[:1] in (";", "&"):
        return not IDENTIFIER.fullmatch(value)
    if KEY_HEAD.fullmatch(prefix.lstrip()) and CONFIG_REST.fullmatch(rest):
        return not NAME.fullmatch(value) or ("." not in value and any(c.isdigit() for c in value))
    return len(value) >= 8 and _mixed(value) and not IDENTIFIER.fullmatch(value)


def _credentials(blob: str) -> bool:
    """Whether a base64 blob decodes to `user:password`."""
    try:
        text = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    user, sep, password = text.partition(":")
    return bool(sep) and text.isprintable() and " " not in user and len(password) >= 3


CONTEXT = [
    Rule("password_assignment", ASSIGNMENT, _assignment, LOCATOR, span=320),
    rule(
        "url_password",
        r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@'\"]*:(?P<v>[^\s/@'\"]+)@[^\s/]+",
        lambda m: not PLACEHOLDERS.search(m["v"]) and m["v"].lower() not in ("password", "pass", "pwd"),
    ),
    rule("basic_auth", r"(?i)\bbasic[ \t]+(?P<v>[A-Za-z0-9+/]{8,}={0,2})", lambda m: _credentials(m["v"])),
    rule("docker_auth", r"\"auth\"\s*:\s*\"(?P<v>[A-Za-z0-9+/]{8,}={0,2})\"", lambda m: _credentials(m["v"])),
    rule(
        "bearer_token",
        r"(?i)\bbearer[ \t]+(?P<v>[A-Za-z0-9._~+/-]{20,}=*)",
        lambda m: looks_secret(m["v"]) and not NAME.fullmatch(m["v"]),
    ),
    rule(
        "netrc_password",
        r"\bmachine\s+\S+\s+(?:login\s+\S+\s+)?password\s+(?P<v>\S+)",
        lambda m: not PLACEHOLDERS.search(m["v"]),
    ),
    rule(
        "pgpass_line",
        r"(?m)(?:^|(?<=[\"'\s]))[\w.*-]*[A-Za-z*][\w.*-]*:(?:\d{1,5}|\*):[^:\s\"']+:[^:\s\"']+:(?P<v>[^:\s\"']{3,})"
        r"(?=[ \t]*$|[\"'\s])",
        check=lambda m: not PLACEHOLDERS.search(m["v"]),
    ),
    rule(
        "curl_user",
        r"\bcurl\b[^\n]*?[ \t](?:-u|--user)(?:=|[ \t]+)[\"']?(?P<v>[^\s:\"']+:[^\s\"']{3,})",
        lambda m: not PLACEHOLDERS.search(m["v"]),
    ),
    rule(
        "nuget_password",
        r"(?i)<add\s+key=\"(?:ClearText)?Password\"\s+value=\"(?P<v>[^\"]{6,})\"",
        lambda m: not PLACEHOLDERS.search(m["v"]),
    ),
]

_BREAK = r"(?:\\?\r?\n[ \t]*)"
_SEG = rf"[A-Za-z0-9_-]+(?:{_BREAK}[A-Za-z0-9_-]+)*"

SHAPES = [
    rule("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    rule(
        "private_key_body",
        r"(?:b3BlbnNzaC1rZXktdjE|\bMII[A-Za-z0-9+/]{2}AIBAAK|\bMII[A-Za-z0-9+/]{2}AIBADAN|\bMIGHAgEAMBMGByqGSM49"
        r"|\bMHcCAQEEI)[A-Za-z0-9+/=\s]{40,}",
    ),
    rule("putty_key", r"PuTTY-User-Key-File-\d+:|Private-Lines:\s*\d+"),
    rule(
        "jwt",
        rf"\beyJ{_SEG}{_BREAK}?\.{_BREAK}?eyJ{_SEG}{_BREAK}?\.{_BREAK}?[A-Za-z0-9_-]{{8,}}",
        lambda m: min(len(p) for p in re.sub(r"\s|\\", "", m[0]).split(".")) >= 8,
    ),
    rule("slack_webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,}"),
    rule(
        "discord_webhook",
        r"discord(?:app)?\.com/api/webhooks/\d{5,25}/[A-Za-z0-9_-]{20,}",
    ),
    rule(
        "teams_webhook",
        r"\.webhook\.office\.com/webhookb2/[\w-]+@[\w-]+/IncomingWebhook/[a-z0-9]{32}/",
    ),
    rule("aws_access_key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    # 40 characters of base64 with upper, lower and a digit, standing alone (a git SHA is lower-case hex); `=` may
    # precede it (`AWS_SECRET_ACCESS_KEY=...`): base64 pads only at its end.
    rule(
        "aws_secret_key",
        r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        check=lambda m: _mixed(m[0]),
    ),
    rule("openai_key", r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"),
    rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    rule("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{16,}"),
    rule("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9]{24,}"),
    rule("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    rule("gitlab_token", r"\b(?:glpat|glptt|glrt|gldt|glcbt|glft|glsoat|gloas|glimt|glagent)-[A-Za-z0-9_-]{20,}"),
    rule("slack_token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"),
    rule("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    rule("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}|\bapi_org_[A-Za-z]{34}\b"),
    rule("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    rule("pypi_token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    rule("groq_key", r"\bgsk_[A-Za-z0-9]{48,}"),
    rule("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    rule("azure_storage_key", r"\bAccountKey=[A-Za-z0-9+/]{86}=="),
    rule(
        "azure_sas_token",
        r"(?i)[?&]sig=[A-Za-z0-9%+/]{30,}(?:%3D|=)",
        lambda m: "sv=" in m.string[max(0, m.start() - 300) : m.end() + 300].lower(),
    ),
    rule("azure_ad_client_secret", r"(?<![\w~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])"),
    rule("sendgrid_key", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    rule("telegram_bot_token", r"(?<![\w:])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![\w-])"),
    rule("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    rule("mailgun_key", r"\bkey-[a-f0-9]{32}\b"),
    rule(
        "atlassian_token",
        r"\bATATT3[A-Za-z0-9_=-]{50,}|(?i:atlassian|jira|confluence)[\w.-]{0,20}[\"']?\s*[:=]\s*[\"']?(?P<v>[a-z0-9]{24})\b",
        lambda m: m["v"] is None or _mixed(m["v"]) or any(c.isdigit() for c in m["v"]),
    ),
    rule("age_secret_key", r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b"),
    rule("twilio_key", r"\b(?:SK|AC)[0-9a-f]{32}\b"),
    # Drawn from gitleaks' rule list: tokens whose prefix names the vendor.
    rule("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}"),
    rule("adobe_client_secret", r"\bp8e-[A-Za-z0-9]{32}\b"),
    rule("alibaba_access_key", r"\bLTAI[A-Za-z0-9]{20}\b"),
    rule("artifactory_key", r"\bAKCp[A-Za-z0-9]{69}\b|\bcmVmd[A-Za-z0-9]{59}\b"),
    rule("bedrock_api_key", r"\bABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    rule("clojars_token", r"\bCLOJARS_[A-Za-z0-9]{60}\b"),
    rule("cloudflare_origin_ca_key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b"),
    rule("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
    rule("defined_networking_token", r"\bdnkey-[A-Za-z0-9=_-]{26}-[A-Za-z0-9=_-]{52}"),
    rule("doppler_token", r"\bdp\.pt\.[A-Za-z0-9]{43}\b"),
    rule("duffel_token", r"\bduffel_(?:test|live)_[A-Za-z0-9_=-]{43}"),
    rule("dynatrace_token", r"\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b"),
    rule("easypost_token", r"\bEZ[AT]K[A-Za-z0-9]{54}\b"),
    rule("facebook_page_token", r"\bEAA[MC][A-Za-z0-9]{100,}"),
    rule("flutterwave_key", r"\bFLW(?:SECK|PUBK)_TEST-[a-hA-H0-9]{32}-X"),
    rule("flyio_token", r"\bfo1_[\w-]{43}\b|\bfm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3}"),
    rule("frameio_token", r"\bfio-u-[A-Za-z0-9_=-]{64}"),
    rule("grafana_token", r"\bglc_[A-Za-z0-9+/]{32,400}={0,3}|\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b"),
    rule("harness_key", r"\b(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}\b"),
    rule("terraform_cloud_token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}"),
    rule("heroku_key", r"\bHRKU-AA[0-9A-Za-z_-]{58}"),
    rule("infracost_token", r"\bico-[A-Za-z0-9]{32}\b"),
    rule("linear_key", r"\blin_api_[A-Za-z0-9]{40}\b"),
    rule("mailchimp_key", r"\b[a-f0-9]{32}-us\d{1,2}\b"),
    rule("mapbox_secret_token", r"\bsk\.eyJ[A-Za-z0-9_-]{50,}\.[A-Za-z0-9_-]{20,}"),
    rule("maxmind_key", r"\b[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b"),
    rule("newrelic_key", r"\bNRAK-[A-Z0-9]{27}\b|\bNRII-[A-Za-z0-9-]{32}\b|\bNRJS-[a-f0-9]{19}\b"),
    rule("notion_token", r"\bntn_\d{11}[A-Za-z0-9]{35}\b|\bsecret_[A-Za-z0-9]{43}\b"),
    rule("octopus_deploy_key", r"\bAPI-[A-Z0-9]{26}\b"),
    rule("openshift_token", r"\bsha256~[\w-]{43}(?![\w-])"),
    rule("perplexity_key", r"\bpplx-[A-Za-z0-9]{48}\b"),
    rule("planetscale_token", r"\bpscale_(?:tkn|pw|oauth)_[\w=.-]{32,64}"),
    rule("postman_token", r"\bPMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}\b"),
    rule("prefect_token", r"\bpnu_[A-Za-z0-9]{36}\b"),
    rule("pulumi_token", r"\bpul-[a-f0-9]{40}\b"),
    rule("readme_token", r"\brdme_[a-z0-9]{70}\b"),
    rule("rubygems_token", r"\brubygems_[a-f0-9]{48}\b"),
    rule("scalingo_token", r"\btk-us-[\w-]{48}"),
    rule("sendinblue_key", r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}\b"),
    rule("sentry_token", r"\bsntry[su]_[A-Za-z0-9+/=_]{60,}"),
    rule("settlemint_token", r"\bsm_(?:pat|aat|sat)_[A-Za-z0-9]{16}\b"),
    rule("shippo_token", r"\bshippo_(?:live|test)_[a-fA-F0-9]{40}\b"),
    rule("sourcegraph_token", r"\bsgp_(?:[a-fA-F0-9]{16}_)?[a-fA-F0-9]{40}\b"),
    rule("square_token", r"\b(?:sq0atp|sq0csp)-[\w-]{22,60}"),
    rule("typeform_token", r"\btfp_[A-Za-z0-9_.=-]{59}"),
    rule("vault_token", r"\bhv[sb]\.[A-Za-z0-9_-]{90,300}"),
    rule("intra42_secret", r"\bs-s4t2(?:ud|af)-[a-f0-9]{64}\b"),
    rule(
        "authress_key",
        r"\b(?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\.[a-z0-9+/_=-]{30,120}",
    ),
]

PERSONAL = [
    # an SSH remote (`git@github.com:org/repo`, `user@host:path`) names a host's service user, not a person
    rule(
        "email",
        r"(?<![\\\w.%+-])(?!git@)[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b(?!:[\w~./-])",
    ),
    rule(
        "phone_number",
        r"(?<![\w.+-])(?:\+\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-]|[.,]\d)"
        r"|(?<![\w+.-])\+\d{1,3}[ .-]?\d{2,4}(?:[ .-]?\d{2,4}){2,4}(?!\w|[.,]\d)"
        r"|(?<![\w+.-])07\d{3}[ -]?\d{3}[ -]?\d{3}(?![\w-]|[.,]\d)",
    ),
    rule("ssn", r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])"),
]

RULES: list[Rule] = [*CONTEXT, *SHAPES, *PERSONAL]
"""Every rule, by kind (names are unique)."""
