"""What the collector sends to other systems (the findings as OTLP logs)."""
