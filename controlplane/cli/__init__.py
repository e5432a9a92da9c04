"""The top floor: the ``spotplane`` CLI (``main``), its subcommands (``control``, ``data``),
``spotplane up`` and the demo. May import every floor below."""
