"""The confirmatory toy study (issue 47): rules frozen in ``rules/`` before fresh seeds."""
