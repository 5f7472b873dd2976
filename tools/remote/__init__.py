"""Transports and hosts: where cases run.

- ``supervisor_client``: the async client of one runner supervisor over any
  byte streams (``ConnectionLost`` when the stream ends or breaks).
- ``errors``: the transport errors, one family on every transport: ``SlotGone``
  (the slot went away) and ``SlotCannotStart`` (it never became usable).
- ``host``: the host layer - what a host kind does (``HostKind``: its own
  inventory fields, start the supervisor with its stdio as the channel, stage
  files, run a short command, probe, where the device comes from) and the one
  slot lifecycle and lease handshake over every kind (``SupervisorSlot``);
  ``kinds``: host kinds by name (a kind NAME is ``HOST_KIND`` of
  tools/remote/NAME.py; references/host-kinds.md).
- ``local``: the ``local`` kind, the runner as a local subprocess (the embedded
  default host ``local``), staged by content hash like the SSH upload.
- ``slot``: the slot contract the pool schedules over (``RunFiles``,
  ``DeviceSlot``, ``SlotSpec``).
- ``ssh``: the ``ssh`` kind: the SSH hosts' connections (one per host,
  ``SSHConnections``), the shipped runner, ``SSHHost``; ``shell``: the shell
  command lines of a host reached through a shell (environment scripts,
  container), shared with the ``command`` kind.
- ``command``: the ``command`` kind, a machine reached by a command prefix
  (``kubectl exec -i POD --``, ``docker exec -i C``, ``ssh -J bastion host``):
  every supervisor, staging and short command one run of it.
- ``slurm``: the ``slurm`` kind, hosts behind Slurm: every slot one ``srun`` job on
  the device the scheduler gave it (``SlurmSlot``); ``slurm_commands`` job names, command
  lines and what Slurm prints; ``slurm_login`` the login host (this machine or
  SSH) and the job queries; ``slurm_channel`` the framed channel through the
  step; ``slurm_step`` the step's own helper (shipped: placement, then a relay
  to the supervisor); ``slurm_partition`` what a partition offers (check_host,
  read-only).
- ``pool``: the registry of warm slots and the queue that spreads a run's
  cases over them (a lost slot started again, bounded).
- ``inventory``, ``lease``, ``host_probe``, ``bundle``, ``safe_stage``,
  ``stage_files``: the hosts, device leases, host probing, what is shipped and
  where it is staged (``stage_files``: the staging checks, standard library
  only, also the stager a command host runs); ``slurm_fields``: the ``slurm``
  kind's own inventory fields.
"""
