"""When W&B goes online: ``WANDB_MODE`` decides where set; else credentials, from
``WANDB_API_KEY`` or the netrc entry ``wandb login`` writes, and a server that answers at the
address of ``WANDB_BASE_URL``. No test here touches the network: the dial is a mock."""

import socket

import pytest

from bytecanary import tracking

KEY = "0123456789abcdef0123456789abcdef01234567"  # the shape of a W&B API key, not one


class Dialler:
    """``socket.create_connection`` that records each address and answers or refuses."""

    def __init__(self, answers: bool) -> None:
        self.answers, self.dialled = answers, []

    def __call__(self, address, timeout=None):
        self.dialled.append(address)
        if not self.answers:
            raise ConnectionRefusedError(111, "Connection refused")
        return self

    def close(self) -> None:
        pass


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No W&B variable of the caller's, and a home of the test's own."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _dial(monkeypatch, answers: bool = True) -> Dialler:
    dialler = Dialler(answers)
    monkeypatch.setattr(socket, "create_connection", dialler)
    return dialler


def _login(path, machine: str = "api.wandb.ai"):
    """The entry ``wandb login`` writes for ``machine``."""
    path.write_text(f"machine {machine}\n  login user\n  password {KEY}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("where", ["NETRC", "HOME"])
def test_credentials_from_wandb_login_go_online(env, monkeypatch, capsys, where):
    if where == "NETRC":
        monkeypatch.setenv("NETRC", str(_login(env / "elsewhere.netrc")))
    else:
        _login(env / ".netrc")
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "online"
    assert dialler.dialled == [("api.wandb.ai", 443)]
    assert KEY not in capsys.readouterr().err


def test_the_entry_wandb_031_writes_counts_too(env, monkeypatch):
    """wandb >= 0.31 logs in to W&B's cloud under CoreWeave's address, its default."""
    _login(env / ".netrc", "api.forge.coreweave.com")
    _dial(monkeypatch)
    assert tracking.wandb_mode() == "online"


def test_an_unreachable_server_is_offline(env, monkeypatch):
    _login(env / ".netrc")
    dialler = _dial(monkeypatch, answers=False)
    assert tracking.wandb_mode() == "offline"
    assert dialler.dialled == [("api.wandb.ai", 443)]


def test_no_credentials_is_offline_without_a_dial(env, monkeypatch):
    (env / ".netrc").write_text(f"machine github.com\n  login me\n  password {KEY}\n", encoding="utf-8")
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "offline"
    assert dialler.dialled == []


def test_an_api_key_goes_online_as_before(env, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "online" and dialler.dialled == [("api.wandb.ai", 443)]


@pytest.mark.parametrize("mode", ["offline", "disabled", "online"])
def test_wandb_mode_wins(env, monkeypatch, mode):
    _login(env / ".netrc")
    monkeypatch.setenv("WANDB_MODE", mode)
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == mode and dialler.dialled == []


@pytest.mark.parametrize(
    ("url", "machine", "address"),
    [
        ("https://wandb.example.org:8443", "wandb.example.org:8443", ("wandb.example.org", 8443)),
        ("https://wandb.example.org:8443", "wandb.example.org", ("wandb.example.org", 8443)),
        ("http://localhost:8080", "localhost:8080", ("localhost", 8080)),
        ("http://wandb.internal", "wandb.internal", ("wandb.internal", 80)),
    ],
)
def test_a_server_of_ones_own_is_the_one_looked_up_and_dialled(env, monkeypatch, url, machine, address):
    monkeypatch.setenv("WANDB_BASE_URL", url)
    _login(env / ".netrc", machine)
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "online" and dialler.dialled == [address]


def test_a_key_for_another_server_does_not_count(env, monkeypatch):
    """The cloud's key says nothing about a server of one's own."""
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    _login(env / ".netrc")
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "offline" and dialler.dialled == []


def test_an_entry_without_a_key_does_not_count(env, monkeypatch):
    (env / ".netrc").write_text("machine api.wandb.ai\n  login user\n", encoding="utf-8")
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "offline" and dialler.dialled == []


@pytest.mark.parametrize(
    "text",
    [
        f"machine api.wandb.ai\n  login user\n  password {KEY}\n  macdef\n",  # a macro without its blank line
        f"machine api.wandb.ai login user password {KEY}\nnonsense {KEY}\n",
        b"\xff\xfe machine api.wandb.ai",
    ],
)
def test_a_malformed_netrc_is_offline_and_one_warning_naming_it(env, monkeypatch, capsys, text):
    netrc = env / "broken.netrc"
    netrc.write_bytes(text if isinstance(text, bytes) else text.encode())
    monkeypatch.setenv("NETRC", str(netrc))
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "offline" and dialler.dialled == []
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {netrc}") and "offline" in lines[0], err
    assert KEY not in err and "Traceback" not in err


def test_a_netrc_that_is_a_folder_is_offline_and_one_warning(env, monkeypatch, capsys):
    (env / ".netrc").mkdir()
    assert tracking.wandb_mode() == "offline"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"warning: {env / '.netrc'}")


def test_a_base_url_that_names_no_server_is_offline_and_one_warning(env, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org:port")
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    dialler = _dial(monkeypatch)
    assert tracking.wandb_mode() == "offline" and dialler.dialled == []
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: WANDB_BASE_URL=https://wandb.example.org:port")
