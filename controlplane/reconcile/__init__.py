"""The reconcile loop's phases, composed in order by :class:`controlplane.reconcile.controller.Controller`.

``state`` (the loop's :class:`~controlplane.reconcile.state.LoopState` and a tick's
``TickWork``), ``contracts`` (settings, executor protocol), ``recorder`` and ``nodeops`` (the
collaborators every phase is given), then one module per step: ``ingest``, ``fleet``, ``jobs``,
``policies``, ``placement``, ``persist``.
"""
