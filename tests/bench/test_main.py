"""`python -m bench NAME [options]` routes options to the one benchmark named, and refuses what it cannot run."""

from conftest import run_module


def test_options_go_with_one_benchmark_only():
    proc = run_module("bench", "faults", "budget", "--trials", "1")
    assert proc.returncode == 1 and "options (--trials 1) go with one benchmark, not 2" in proc.stderr


def test_an_unknown_benchmark_is_named():
    proc = run_module("bench", "fault", "--trials", "1")
    assert proc.returncode == 1 and "unknown benchmark(s) ['fault']" in proc.stderr


def test_a_benchmark_gets_its_options():
    proc = run_module("bench", "faults", "--no-such-option")
    assert proc.returncode == 2 and "--no-such-option" in proc.stderr
