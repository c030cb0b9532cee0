"""`msmon validate`: the checks that run before a single training step is spent."""

from msmon.validate.validator import ValidationResult, validate, validate_config

__all__ = ["ValidationResult", "validate", "validate_config"]
