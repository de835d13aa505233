"""``stripemq chaos`` on the command line: bad arguments are refused before any process
starts, and the verdict is printed as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from stripemq.cli.chaos import main, render_verdict
from stripemq.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["--duration", "0"],
        ["--duration", "soon"],
        ["--faults", "-1"],
        ["--rate", "-5"],
        ["--recovery-bound", "0"],
        ["--seed", "x"],
    ],
)
def test_bad_numbers_are_refused_with_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "usage: stripemq chaos" in capsys.readouterr().err


def test_an_unknown_fault_kind_is_named_with_the_kinds_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--kinds", "bookie_kill,meteor"]) == 2
    err = capsys.readouterr().err
    assert "'meteor'" in err and "broker_session_expiry" in err


def test_the_full_parser_knows_the_command() -> None:
    args = build_parser().parse_args(["chaos", "--seed", "3", "--faults", "5", "--out", "d"])
    assert (args.command, args.seed, args.faults, args.out) == ("chaos", 3, 5, Path("d"))
    assert args.duration == 60.0 and args.kinds is None


def test_the_verdict_table_names_each_check_and_the_figures() -> None:
    summary = {
        "verdict": "fail",
        "seed": 9,
        "acked": 10,
        "lost": 1,
        "duplicated": 0,
        "reordered": 0,
        "unknown": 2,
        "failed": 0,
        "recovery_s": 1.5,
        "faults": {"bookie_kill": 3},
        "checks": [
            {"name": "no acknowledged message lost", "passed": False, "detail": "1 of 10"},
            {"name": "stored in order", "passed": True, "detail": "0 out of order"},
        ],
        "notes": ["something"],
    }
    text = render_verdict(summary, Path("out"))
    assert text.splitlines()[0] == "verdict: FAIL (seed 9)"
    assert "FAIL  no acknowledged message lost: 1 of 10" in text
    assert "PASS  stored in order" in text
    assert "bookie_kill 3" in text and "note: something" in text
    assert "out/report.html" in text
