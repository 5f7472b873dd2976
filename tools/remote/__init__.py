"""Transports and hosts: where cases run.

- ``supervisor_client``: the async client of one runner supervisor over any
  byte streams (``ConnectionLost`` when the stream ends or breaks).
- ``errors``: the transport errors, one family on every transport: ``SlotGone``
  (the slot went away) and ``SlotCannotStart`` (it never became usable).
- ``local``: the runner as a local subprocess (the embedded default host
  ``local``), staged by content hash like the SSH upload.
- ``inventory``, ``ssh``, ``pool``, ``lease``, ``host_probe``: the SSH hosts,
  their warm device slots and device leases.
"""
