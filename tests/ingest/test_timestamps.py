from tracecomm.ingest.timestamps import us_text_to_ns


def test_decimal_text_and_ints_become_exact_ns() -> None:
    values = [
        "1712195495519689.047",  # 19 significant digits: float64 would lose the ns
        1682725898236567,  # integer epoch µs
        "5077185321273.005",
        "68.0",
        "7.12345",  # beyond ns: rounded half away from zero
        "0.0005",
        "-0.5",
        "1.5e3",
        "2E-3",
        None,
        "garbage",
    ]
    got = us_text_to_ns(values, "t").to_list()
    assert got == [
        1712195495519689047,
        1682725898236567000,
        5077185321273005,
        68000,
        7123,
        1,
        -500,
        1500000,
        2,
        None,
        None,
    ]
