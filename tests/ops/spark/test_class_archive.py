"""The driver's class archive: found by a digest of the JVM and its jars, used by sessions."""

from ops.spark import class_archive
from ops.spark.jars import spark_jar_conf


def test_the_archive_is_named_by_the_jars_so_a_changed_jar_names_another(tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"one")
    conf = {"spark.jars": str(jar)}
    before = class_archive.archive_path(conf)
    assert class_archive.archive_path(conf) == before  # the same install, the same name

    jar.write_bytes(b"a longer jar")
    assert class_archive.archive_path(conf) != before
    assert class_archive.archive_path({}) != class_archive.archive_path(conf)


def test_options_name_the_archive_only_when_it_is_there_and_wanted(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESTREAM_JARS_DIR", str(tmp_path))
    conf = {"spark.jars": ""}
    assert class_archive.java_options(conf) == ""  # not made yet

    archive = class_archive.archive_path(conf)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in class_archive.java_options(conf)

    monkeypatch.setenv("LAKESTREAM_CLASS_ARCHIVE", "off")
    assert class_archive.java_options(conf) == ""


def test_the_suites_session_was_started_with_the_archive_the_install_made(spark):
    """The install step trains the archive (.ci/install); the session maps it at start."""
    archive = class_archive.archive_path(spark_jar_conf())
    assert archive.exists(), f"no class archive at {archive}: run .ci/install"
    options = spark.sparkContext._jvm.java.lang.management.ManagementFactory \
        .getRuntimeMXBean().getInputArguments().toString()
    assert f"-XX:SharedArchiveFile={archive}" in options
