"""The reference's httpx client with aiohttp's connector under it (the ``httpx-aiohttp``
package), and nothing else changed.

Notebook 02 says this change alone keeps full marks; the verdict table grades it beside the
references to hold it to that.
"""

PATCHES = [
    (
        "    return httpx.AsyncClient(base_url=upstream_url, timeout=upstream_timeout(), "
        "limits=limits)\n",
        "    from httpx_aiohttp import AiohttpTransport\n"
        "\n"
        "    transport = AiohttpTransport(limits=limits)\n"
        "    return httpx.AsyncClient(\n"
        "        base_url=upstream_url, timeout=upstream_timeout(), transport=transport\n"
        "    )\n",
    ),
]
