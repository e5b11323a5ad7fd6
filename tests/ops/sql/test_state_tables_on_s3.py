"""A SQL state table and its changelog with the warehouse on S3."""

import ops as sp


def test_a_sql_state_table_and_its_changelog_on_s3(spark, s3_warehouse):
    sales = sp.read.from_callback("sales", schema={"title": "string", "amount": "double"})
    tickets = sp.sql("CREATE TABLE tickets AS SELECT title, COUNT(*) AS sold, SUM(amount) AS revenue "
                     "FROM sales GROUP BY title EMIT CHANGES", streams={"sales": sales})
    tickets.publish(spark, [{"title": "Heat", "amount": 5.0}, {"title": "Aliens", "amount": 7.0}],
                    s3_warehouse)
    tickets.run_once(spark, s3_warehouse)
    tickets.publish(spark, [{"title": "Heat", "amount": 6.0}], s3_warehouse)
    tickets.run_once(spark, s3_warehouse)

    table = tickets.read_sink(spark, "tickets", s3_warehouse).sort_values("title")
    assert table[["title", "sold", "revenue"]].values.tolist() == [["Aliens", 1, 7.0], ["Heat", 2, 11.0]]
    changelog = spark.read.format("delta").load(f"{tickets.layout(s3_warehouse).root}/tickets_changelog")
    heat = changelog.where("title = 'Heat'").orderBy("_batch_id").toPandas()
    assert heat["sold"].tolist() == [1, 2]  # each batch's change, in order
