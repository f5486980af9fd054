"""The benchmarks' JSON-lines report: one line per figure (device, workload, metric,
value and any extra fields), printed and appended to --json FILE; `rows` keeps
(workload, metric, value) for the table a script prints last."""

import json


class Report:
    def __init__(self, device, json_path):
        self.device, self.rows = device, []
        self.fh = open(json_path, "a") if json_path else None

    def add(self, workload, metric, value, **extra):
        line = json.dumps({"device": self.device, "workload": workload, "metric": metric,
                           "value": value, **extra})
        print(line, flush=True)
        if self.fh:
            self.fh.write(line + "\n")
            self.fh.flush()
        self.rows.append((workload, metric, value))

    def print_summary(self, metric_width=30):
        """The table a script prints last: one row per figure, in the order added."""
        print("\n# summary")
        width = max((len(w) for w, _, _ in self.rows), default=10)
        for workload, metric, value in self.rows:
            v = f"{value:.4g}" if isinstance(value, float) else str(value)
            print(f"{workload:<{width}}  {metric:<{metric_width}} {v}")
