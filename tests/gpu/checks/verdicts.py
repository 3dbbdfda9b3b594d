"""The PASS/FAIL table a GPU check prints as it goes and once more at its end (sleep_wake.py,
host_tier.py): one row per measured item, a verdict where the item is a goal, and a last line
"<check>: PASS" or "<check>: FAIL: <failed rows>" that tests/gpu/check_all.sh shows as the
check's summary."""
import os


class Verdicts:
    def __init__(self, check, name_width=46, value_width=0):
        self.check, self.fmt = check, "%%-%ds %%-%ds %%s" % (name_width, value_width)
        self.rows, self.fails = [], []

    def row(self, name, value, ok=None):
        """A measured item; ok True/False makes it a goal that passed or failed."""
        r = (name, value, "" if ok is None else ("PASS" if ok else "FAIL"))
        self.rows.append(r)
        if ok is False:
            self.fails.append(name)
        print(self.fmt % r, flush=True)

    def finish(self, out_dir):
        """Prints the whole table and writes it to <out_dir>/<check>.txt (out_dir may be None);
        the exit status: 1 if a goal failed, else 0."""
        text = "\n".join(self.fmt % r for r in self.rows)
        text += "\n%s: %s\n" % (self.check, "PASS" if not self.fails else "FAIL: " + "; ".join(self.fails))
        if out_dir:
            with open(os.path.join(out_dir, self.check + ".txt"), "w") as f:
                f.write(text)
        print("\n" + text, end="")
        return 1 if self.fails else 0
