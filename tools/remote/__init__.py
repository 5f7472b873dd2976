"""Transports and hosts: where cases run.

- ``supervisor_client``: the async client of one runner supervisor over any
  byte streams (``ConnectionLost`` when the stream ends or breaks).
- ``errors``: the transport errors, one family on every transport: ``SlotGone``
  (the slot went away) and ``SlotCannotStart`` (it never became usable).
- ``local``: the runner as a local subprocess (the embedded default host
  ``local``), staged by content hash like the SSH upload.
- ``slot``: the slot contract every transport implements and the pool
  schedules over (``RunFiles``, ``DeviceSlot``, ``SlotSpec``).
- ``ssh``: the SSH hosts' connections (one per host, ``SSHConnections``),
  the shipped runner and ``SSHDeviceSlot``.
- ``slurm``: hosts behind Slurm: every slot one ``srun`` job on the device
  the scheduler gave it (``SlurmSlot``); ``slurm_commands`` job names, command
  lines and what Slurm prints; ``slurm_login`` the login host (this machine or
  SSH) and the job queries; ``slurm_channel`` the framed channel through the
  step; ``slurm_step`` the step's own helper (shipped: placement, then a relay
  to the supervisor); ``slurm_partition`` what a partition offers (check_host,
  read-only).
- ``pool``: the registry of warm slots and the queue that spreads a run's
  cases over them (a lost slot started again, bounded).
- ``inventory``, ``lease``, ``host_probe``, ``bundle``, ``safe_stage``: the
  hosts, device leases, host probing, what is shipped and where it is staged.
"""
