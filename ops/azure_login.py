"""Your Azure login (`az login`, a service principal's AZURE_* variables...), as every
`fab` flow that talks to Azure uses it: preflight and the boxes' power ask ARM with it,
the registry login trades it for an ACR token.

azure-identity is imported only when a token is asked for, so AWS users need none.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

ARM_SCOPE = "https://management.azure.com/.default"


def arm_credential() -> TokenCredential:
    """Whoever is logged in, as the Azure SDK's clients take a login (they ask it for
    tokens, renewed as they expire); azure-identity's own error, when asked, if nobody is."""
    from azure.identity import DefaultAzureCredential

    # With no login, azure-identity logs every credential it tried (a dozen lines) as a
    # warning, then raises saying the same: each caller makes that one line.
    logging.getLogger("azure.identity").setLevel(logging.ERROR)
    return DefaultAzureCredential(exclude_interactive_browser_credential=True)


def arm_token() -> str:
    """An ARM token for whoever is logged in; azure-identity's own error when nobody is."""
    return arm_credential().get_token(ARM_SCOPE).token
