"""The transports moved to the kernel (vertisynth/core/transport.py) so the collab roles, a peer of deploy, use
them too; this module keeps the deploy layer's import path working."""
from vertisynth.core.transport import (RELAY, FolderTransport, FsspecTransport, RelayFolderTransport,  # noqa: F401
                                       ReportsWaiting, ThrottlesPolls, Transport, check_sftp_host_key, poll_wait, local_folder,
                                       read_generation, store_failures, transport_for)
