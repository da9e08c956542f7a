"""The test base's debootstrap mirror is the Debian archive among the host's apt sources."""

from tests.fixtures.trainer_image import DEBIAN_FALLBACK_MIRROR, debian_mirror


def test_debian_archive_is_picked_over_security_and_third_party_sources(tmp_path):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "a-cloud-sdk.list").write_text(
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
    )
    (sources / "debian.sources").write_text(
        "Types: deb\n"
        "# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.debian.org/debian-security\n"
        "Suites: bookworm-security\n\n"
        "Types: deb\n"
        "URIs: http://mirror.example.org/debian/\n"
        "Suites: bookworm bookworm-updates\n"
    )
    assert debian_mirror(sources) == "http://mirror.example.org/debian"


def test_one_line_sources_format_is_read(tmp_path):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "main.list").write_text(
        "deb [arch=amd64] http://ftp.example.net/debian bookworm main\n"
    )
    assert debian_mirror(sources) == "http://ftp.example.net/debian"


def test_no_debian_source_falls_back_to_deb_debian_org(tmp_path):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "node.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\n"
    )
    assert debian_mirror(sources) == DEBIAN_FALLBACK_MIRROR
