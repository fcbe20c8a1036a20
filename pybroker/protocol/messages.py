"""Every generated message, struct-holder and record class, importable by name.

`from pybroker.protocol.messages import ProduceRequest, FetchResponse`. Importing this
module loads all schema modules (~0.4 s); hot code that needs one API may import its
module directly (`pybroker.protocol._generated.produce_request`) or use
`api_keys.REQUEST_CLASSES`.
"""

from pybroker.protocol._generated.all_messages import *  # noqa: F403
from pybroker.protocol._generated.all_messages import __all__  # noqa: F401
