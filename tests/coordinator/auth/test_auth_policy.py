"""The pure parts of security: ACL decisions (Kafka's rules), token files, principals, options
validation, ``--print-config`` masking, and the principal kept in group records."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import tomllib
from pathlib import Path
from typing import Any

import pytest

from groupcoord.channels import ClientSecurity
from groupcoord.cli import main
from groupcoord.coordinator.auth.acl import (
    DECISION_BYTES_KEPT,
    DECISION_KEY_MAX_CHARS,
    DECISIONS_KEPT,
    AclError,
    Operation,
    parse_acls,
)
from groupcoord.coordinator.auth.principals import ANONYMOUS, Authenticated, Refused, authenticate
from groupcoord.coordinator.auth.refusals import MAX_READ_PAUSE_S, RefusalDelay, RefusalLog, quoted
from groupcoord.coordinator.auth.tokens import TokenFileError, parse_tokens
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.ha.zk_security import ZkSecurity, load_zk_security
from groupcoord.coordinator.model.records import finish_record, group_from_record, group_to_record
from groupcoord.coordinator.process.print_config import MASK, render_options
from groupcoord.coordinator.process.serve import ServeOptions, tighten_data_dir
from groupcoord.coordinator.testing import Harness

ACLS = parse_acls(tomllib.loads("""
super_users = ["User:root"]

[[acl]]
principal = "User:worker-a"
group = "a"
operations = ["member"]

[[acl]]
principal = "User:viewer"
group = "team-"
pattern = "prefixed"
operations = ["describe"]

[[acl]]
principal = "User:viewer"
group = "team-secret"
operations = ["describe"]
permission = "deny"

[[acl]]
principal = "User:*"
group = "public"
operations = ["describe"]

[[acl]]
principal = "User:ops"
cluster = true
operations = ["admin"]

[[acl]]
principal = "User:ops"
group = "locked"
operations = ["member"]
permission = "deny"
"""))

D, M, A = Operation.DESCRIBE, Operation.MEMBER, Operation.ADMIN


@pytest.mark.parametrize(("principal", "operation", "group", "allowed"), [
    ("User:worker-a", M, "a", True),
    ("User:worker-a", D, "a", True),             # member implies describe (Kafka: READ implies DESCRIBE)
    ("User:worker-a", A, "a", False),            # ... but not admin
    ("User:worker-a", M, "b", False),            # no ACL for the group: denied
    ("User:worker-a", M, "ab", False),           # literal means exact
    ("User:viewer", D, "team-x", True),          # prefixed
    ("User:viewer", M, "team-x", False),
    ("User:viewer", D, "team-secret", False),    # a DENY wins over a matching ALLOW
    ("User:viewer", D, "tea", False),
    ("User:anyone", D, "public", True),          # User:* matches every principal
    ("User:anyone", M, "public", False),
    ("User:ops", A, "anything", True),           # cluster admin: admin on every group
    ("User:ops", M, "anything", True),
    ("User:ops", M, "locked", False),            # ... except where a DENY says otherwise
    ("User:ops", A, "locked", False),            # (denying member denies admin, which implies it)
    ("User:ops", D, "locked", True),
    ("User:root", A, "locked", True),            # super users bypass every ACL, as super.users does
    (ANONYMOUS, D, "a", False),
])
def test_acl_decisions(principal: str, operation: Operation, group: str, allowed: bool) -> None:
    assert ACLS.allows(principal, operation, group) is allowed
    assert ACLS.allows(principal, operation, group) is allowed  # the remembered decision is the same


def test_remembered_acl_decisions_are_bounded() -> None:
    acls = parse_acls(tomllib.loads('''
[[acl]]
principal = "User:w"
group = "g-"
pattern = "prefixed"
operations = ["member"]
'''))
    for i in range(3 * DECISIONS_KEPT):  # a caller naming ever new groups
        assert acls.allows("User:w", M, f"g-{i}") and not acls.allows("User:w", M, f"h-{i}")
        assert len(acls._decided) <= DECISIONS_KEPT


def test_decisions_about_long_ids_are_not_remembered_and_the_remembered_ones_are_bounded_in_bytes() -> None:
    """Issue 38: 16 JoinGroups naming 8 MiB group ids held 128 MiB in this cache."""
    acls = parse_acls(tomllib.loads('[[acl]]\nprincipal = "User:w"\ngroup = "g-"\npattern = "prefixed"\n'
                                    'operations = ["member"]'))
    for i in range(16):
        assert acls.allows("User:w", M, f"g-{i}-" + "x" * 1_048_576)
        assert not acls.allows("User:w", M, f"h-{i}-" + "x" * 1_048_576)
    assert acls.remembered() == (0, 0)
    long_enough = "x" * (DECISION_KEY_MAX_CHARS - 20)  # remembered, each near the per-key bound
    for i in range(3 * DECISION_BYTES_KEPT // DECISION_KEY_MAX_CHARS):
        assert acls.allows("User:w", M, f"g-{i:06d}{long_enough}")
        assert acls.remembered()[1] <= DECISION_BYTES_KEPT
    assert 0 < acls.remembered()[0] < DECISIONS_KEPT  # the byte bound, not the count, cleared it


def test_the_no_right_anywhere_answer_only_refuses_who_no_entry_could_allow() -> None:
    assert ACLS.allows_somewhere("User:ops", A) and ACLS.allows_somewhere("User:worker-a", M)
    assert not ACLS.allows_somewhere("User:worker-a", A)  # member of a, admin of nothing
    assert ACLS.allows_somewhere("User:root", A)  # a super user
    assert ACLS.allows_somewhere(ANONYMOUS, D) and not ACLS.allows_somewhere(ANONYMOUS, M)  # User:* on public


def test_refusal_lines_are_rate_limited_and_say_how_many_they_left_out(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), lines_per_window=3, window_s=10, clock=clock.now)
    with caplog.at_level(logging.WARNING, logger="test.refusals"):
        written = [refusals.refused("/m", "-", f"call {i}") for i in range(1_000)]
        assert written.count(True) == 3 and refusals.left_out == 997
        clock.advance(10)
        assert refusals.refused("/m", "-", "next window")
    assert len(caplog.records) == 4
    assert "997 more refusals not logged" in caplog.records[-1].getMessage()


def test_a_refusal_after_reading_waits_longer_for_the_bytes_it_read() -> None:
    assert RefusalDelay.length(0.1) == pytest.approx(0.1)
    assert RefusalDelay.length(0.1, 21 * 1_048_576) == pytest.approx(0.1 + 21 / 16)  # 16 MiB a second
    assert RefusalDelay.length(0.1, 64 * 1_048_576) == pytest.approx(0.1 + MAX_READ_PAUSE_S)
    assert RefusalDelay.length(0, 64 * 1_048_576) == 0  # failed_request_delay_ms = 0: at once


def test_client_input_is_quoted_to_a_short_prefix() -> None:
    assert quoted("shop") == "'shop'"
    long = quoted("x" * 8_388_608)
    assert len(long) < 100 and "8,388,608 characters" in long


def test_cluster_level_admin_needs_a_cluster_entry() -> None:
    assert ACLS.allows("User:ops", A, None)
    assert not ACLS.allows("User:worker-a", A, None)


@pytest.mark.parametrize(("text", "message"), [
    ('[[acl]]\nprincipal = "worker"\ngroup = "a"\noperations = ["member"]', "must look like User:NAME"),
    ('[[acl]]\nprincipal = "User:w"\ngroup = "a"\noperations = ["write"]', "unknown operation 'write'"),
    ('[[acl]]\nprincipal = "User:w"\noperations = ["member"]', "exactly one resource"),
    ('[[acl]]\nprincipal = "User:w"\ngroup = "a"\ncluster = true\noperations = ["admin"]', "exactly one resource"),
    ('[[acl]]\nprincipal = "User:w"\ngroup = "a"\npattern = "regex"\noperations = ["member"]', "literal or prefixed"),
    ('[[acl]]\nprincipal = "User:w"\ngroup = "a"\noperations = ["member"]\nallow = true', "unknown key(s) allow"),
    ('[[acl]]\nprincipal = "User:w"\ncluster = true\noperations = ["member"]', "operations = [\"admin\"] only"),
    ('superusers = ["User:x"]', "unknown key(s) superusers"),
])
def test_acl_file_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(AclError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_acls(tomllib.loads(text))


def test_tokens_are_kept_hashed_and_name_their_principal() -> None:
    digest = hashlib.sha256(b"t0k3n").hexdigest()
    table = parse_tokens(f"# comment\nworker-a sha256:{digest}  # rotated 2026-01\n\n")
    assert table.principal_for("t0k3n") == "User:worker-a"
    assert table.principal_for("other") is None
    assert "t0k3n" not in repr(table)
    with pytest.raises(TokenFileError, match="line 1: expected 'NAME sha256:<64 hex digits>'"):
        parse_tokens("worker-a t0k3n")
    with pytest.raises(TokenFileError, match="already given to 'a'"):
        parse_tokens(f"a sha256:{digest}\nb sha256:{digest}")


def test_authenticate_from_certificate_token_or_nothing() -> None:
    table = parse_tokens(f"w sha256:{hashlib.sha256(b'secret').hexdigest()}")
    cert = {"x509_subject": [b"CN=w,O=Example"]}
    assert authenticate(cert, (), mtls=True, tokens=None) == Authenticated("User:CN=w,O=Example")
    assert authenticate({}, (), mtls=False, tokens=None) == Authenticated(ANONYMOUS)
    assert authenticate({}, [("authorization", "Bearer secret")], mtls=False, tokens=table) == Authenticated("User:w")
    assert isinstance(authenticate({}, [], mtls=False, tokens=table), Refused)
    assert authenticate({}, [("authorization", "Bearer nope")], mtls=False, tokens=table) == Refused("invalid token")
    assert isinstance(authenticate({}, [("authorization", "Basic eA==")], mtls=False, tokens=table), Refused)


def test_member_principal_survives_a_record_and_old_records_load() -> None:
    harness = Harness()
    member_id, _ = harness.join_new("g")
    record = group_to_record(harness.group("g"))
    assert record["members"][0]["principal"] == ""
    harness.group("g").members[member_id].principal = "User:w"
    record = json.loads(json.dumps(finish_record(group_to_record(harness.group("g")))))
    assert group_from_record(record).members[member_id].principal == "User:w"
    del record["members"][0]["principal"]  # written before principals were kept
    assert group_from_record(record).members[member_id].principal == ""


def _args(**values: Any) -> argparse.Namespace:
    return argparse.Namespace(config=None, **values)


@pytest.mark.parametrize(("values", "message"), [
    ({"tls_cert": "c.pem"}, "--tls-cert and --tls-key go together"),
    ({"tls_client_ca": "ca.pem"}, "needs --tls-cert"),
    ({"tls_cert": "c", "tls_key": "k", "tls_client_ca": "ca", "token_file": "t"}, "choose one way"),
])
def test_security_options_that_do_not_fit_together(values: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServeOptions.from_args(_args(**values))


def test_zookeeper_security_options(tmp_path: Path) -> None:
    creds = tmp_path / "zk.creds"
    creds.write_text("groupcoord:pw\n")
    creds.chmod(0o600)
    security = load_zk_security(auth="digest", credentials_file=creds, tls_ca=tmp_path / "ca.pem",
                                tls_cert=None, tls_key=None)
    kwargs = security.kazoo_kwargs()
    assert kwargs["auth_data"] == [("digest", "groupcoord:pw")]
    assert kwargs["use_ssl"] is True and kwargs["ca"] == str(tmp_path / "ca.pem")
    assert kwargs["default_acl"][0].id.scheme == "digest"
    assert "pw" not in repr(security)
    assert ZkSecurity().kazoo_kwargs() == {}
    with pytest.raises(ValueError, match="needs zk_credentials_file"):
        load_zk_security(auth="digest", credentials_file=None, tls_ca=None, tls_cert=None, tls_key=None)


def test_print_config_masks_secrets_and_prints_every_field(tmp_path: Path) -> None:
    options = ServeOptions.from_args(_args(tls_cert="/etc/gc/server.pem", tls_key="/etc/gc/server.key",
                                           token_file="/etc/gc/tokens", listen="0.0.0.0:9400"))
    text = render_options(options)
    document = tomllib.loads(text)  # valid TOML
    assert document["server"]["tls_key"] == "/etc/gc/server.key"  # a path, shown as one
    assert document["server"]["token_file"] == "/etc/gc/tokens"
    assert document["coordinator"]["group_max_size"] == options.coordinator.group_max_size
    for field in dataclasses.fields(options):  # every option, set or not (generic: later ones too)
        assert field.name in document or field.name in document["server"] or f"# {field.name} = (not set)" in text

    @dataclasses.dataclass(frozen=True)
    class Later:  # an option another engineer adds later, holding a secret inline
        metrics_listen: str = "127.0.0.1:9401"
        api_token: str = "s3cr3t-value"
        zk_password: str = "hunter2"

    shown = render_options(Later(), "json")
    assert "s3cr3t-value" not in shown and "hunter2" not in shown
    assert json.loads(shown)["server"] == {"metrics_listen": "127.0.0.1:9401", "api_token": MASK, "zk_password": MASK}


def test_serve_print_config_exits_0_without_reading_the_token_file(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("w sha256:" + "ab" * 32 + "\n")
    config = tmp_path / "gc.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:9555"\ntoken_file = "{tokens}"\n')
    assert main(["serve", "--config", str(config), "--data-dir", str(tmp_path / "d"), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert f'token_file = "{tokens}"' in out and "ab" * 32 not in out
    assert 'listen = "127.0.0.1:9555"' in out and 'data_dir = "' in out
    assert not (tmp_path / "d").exists()  # printed, not served


@pytest.mark.parametrize(("flags", "message"), [
    (["--acl-file", "/nonexistent/acls.toml"], "cannot read ACL file /nonexistent/acls.toml"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"], "cannot read --tls-key"),
])
def test_serve_with_an_unreadable_security_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_token_is_never_sent_in_plaintext_beyond_loopback(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    token.chmod(0o600)
    assert main(["groups", "list", "--coordinator", "10.1.2.3:9400", "--token-file", str(token)]) == 2
    assert "only over TLS: add --tls-ca" in capsys.readouterr().err


@pytest.mark.parametrize(("what", "mode", "message"), [
    ("token", 0o644, "readable by others (mode 0644)"),
    ("token", 0o666, "readable by others (mode 0666)"),
    ("acl", 0o666, "writable by others (mode 0666)"),
    ("tls-key", 0o644, "readable by others (mode 0644)"),
])
def test_serve_refuses_credential_files_others_can_read_or_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, mode: int, message: str
) -> None:
    path = tmp_path / what
    path.write_text('w sha256:' + "ab" * 32 + "\n" if what == "token" else "")
    path.chmod(mode)
    flags = {"token": ["--token-file", str(path)], "acl": ["--acl-file", str(path)],
             "tls-key": ["--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(path)]}[what]
    assert main(["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("mode", [0o644, 0o604])
def test_clients_refuse_a_token_file_others_can_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      mode: int) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    token.chmod(mode)
    assert main(["groups", "list", "--coordinator", "127.0.0.1:1", "--token-file", str(token)]) == 2
    assert f"is readable by others (mode {mode:04o})" in capsys.readouterr().err
    token.chmod(0o640)  # group-readable (a service group) is fine
    ClientSecurity(token_file=str(token)).check(["127.0.0.1:1"])


def test_serve_tightens_an_existing_data_directory_others_can_enter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "d"
    data.mkdir()
    data.chmod(0o755)
    tighten_data_dir(data)
    assert "was mode 0755: tightened to 0700" in capsys.readouterr().err
    assert data.stat().st_mode & 0o777 == 0o700
    tighten_data_dir(data)  # already the operator's only: nothing said
    assert capsys.readouterr().err == ""
