"""The Prometheus exposition: records rendered as series (exposition.py) within a series
budget (budget.py), their labels (labels.py), the /metrics HTTP exporter (exporter.py,
http.py), and many ticks as one OpenMetrics file (dump.py)."""
