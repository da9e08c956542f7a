"""What runs on the user's machine: `fab` tasks and what they need, grouped by the flow."""

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
"""The project checkout `fab` runs from: the image's build context, and where the
trusted host keys (`.known_hosts`) are kept unless GLUCOSE_KNOWN_HOSTS moves them."""
