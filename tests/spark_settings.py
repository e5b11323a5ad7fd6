"""Spark and JVM settings for the suite: its data is small and most of its JVMs live briefly."""

#: Spark settings for the suite's small data, in its session and its children's. A test's
#: batches are a few rows: compiling each new query to Java (whole-stage code generation, then
#: Janino) costs more than evaluating it row by row, and the suite runs hundreds of query
#: shapes once each (measured: tests/ops/sql and sources 4:33 -> 3:42). What is computed is the
#: same either way: lakestream's code never depends on how Spark evaluates a plan.
SMALL_DATA_CONF = {"spark.sql.codegen.wholeStage": "false",
                   "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

#: JVM options for the suite's short-lived JVMs (a child's driver, a standalone cluster's): they
#: live for a few small batches, where C2's optimising never pays back and, on two cores,
#: competes with the work (a six-batch crash child: 15.8 -> 12.8 s). The suite's own session
#: lives for the whole run and was 40% slower so: it keeps the default.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
