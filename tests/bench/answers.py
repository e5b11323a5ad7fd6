"""The check every Nexmark query test makes: lakestream's answer is the brute-force one."""

from bench.nexmark import lakestream, oracle, queries

#: the queries lakestream runs, in SQL or in Python
EXPRESSED = [query.name for query in queries.QUERIES if query.expressed]


def assert_brute_force_answer(spark, warehouse: str, nexmark, name: str, mode: str,
                              max_versions: int | None) -> None:
    folder, batches = nexmark
    got = lakestream.run(spark, queries.query(name), folder, warehouse, mode, max_versions)
    expected = oracle.answer(name, batches)
    assert len(expected) > 0, f"{name}: the stream is too small to test it"
    assert oracle.same_rows(got.rows, expected) is None, oracle.same_rows(got.rows, expected)
