"""``python -m ops.devservers.s3_server``: a bucket name S3 refuses ends the command with one line and a
non-zero exit, leaving no server behind (the server is started here on loopback, on a free
port, and stopped by its pid)."""

import pytest

from ops.devservers.process import free_port, listening
from ops.devservers.s3_server import LocalS3, check_bucket_name, main
from ops.errors import ConfigError


@pytest.fixture
def folder(tmp_path):
    """The command's folder; whatever server a test left there is stopped by its pid."""
    yield str(tmp_path / "s3")
    left = LocalS3.attach(tmp_path / "s3")
    if left is not None:
        left.stop()


def test_a_bucket_name_s3_refuses_exits_non_zero_with_one_line_and_no_server(folder, capsys):
    port = free_port()
    with pytest.raises(SystemExit) as ended:
        main(["start", "--dir", folder, "--port", str(port), "--bucket", "rk"])
    assert ended.value.code == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "bucket name 'rk' is refused by S3: 3 to 63" in error
    assert LocalS3.attach(folder) is None and not listening(port)


def test_start_with_a_good_bucket_then_stop(folder, capsys):
    main(["start", "--dir", folder, "--port", str(free_port()), "--bucket", "lake"])
    running = LocalS3.attach(folder)
    assert running is not None and "export AWS_ENDPOINT_URL=" in capsys.readouterr().out
    with pytest.raises(SystemExit) as ended:  # a running server is left as it was
        main(["start", "--dir", folder, "--bucket", "Lake"])
    assert ended.value.code == 1 and LocalS3.attach(folder) is not None
    main(["stop", "--dir", folder])
    assert LocalS3.attach(folder) is None and not listening(running.port)


@pytest.mark.parametrize("name, rule", [
    ("a" * 64, "3 to 63"), ("Lake", "lowercase"), ("-lake", "beginning and ending"),
    ("la..ke", "two dots"), ("192.168.0.1", "IP address"), ("xn--lake", "reserved"),
    ("lake-s3alias", "reserved"), ("la_ke", "lowercase")])
def test_bucket_names_are_checked_against_s3s_rules(name, rule):
    with pytest.raises(ConfigError, match=rule):
        check_bucket_name(name)
    check_bucket_name("my.lake-2")
