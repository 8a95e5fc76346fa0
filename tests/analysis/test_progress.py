from analysis.progress import LINE_EVERY_S, Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_comes_at_most_every_interval_with_the_count_and_time():
    clock, lines = Clock(), []
    progress = Progress(10, "calibration", lines.append, terminal=False, clock=clock)
    progress.update()
    clock.now += LINE_EVERY_S - 1
    progress.update()
    assert lines == []  # not yet an interval since the start
    clock.now += 1
    progress.update()
    clock.now += 5
    progress.update(2)  # within the interval after the last line
    clock.now += LINE_EVERY_S + 35
    progress.update()
    progress.close()
    assert lines == ["calibration: 3 of 10 requests, 0 min 30 s",
                     "calibration: 6 of 10 requests, 1 min 40 s"]


def test_on_a_terminal_the_bar_draws_on_stderr_and_nothing_is_logged(capsys):
    lines = []
    progress = Progress(3, "calibration", lines.append, terminal=True)
    for _ in range(3):
        progress.update()
    progress.close()
    assert lines == []
    assert "calibration" in capsys.readouterr().err and progress.bar.n == 3
