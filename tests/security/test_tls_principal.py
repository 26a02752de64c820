"""A client certificate's principal as Kafka builds it: the subject DN as Java's
``X500Principal.getName()`` writes it (RFC 2253), then ``ssl.principal.mapping.rules``."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from tls_certs import Pki, name_of, tls_certs  # noqa: F401

from tieredlog.security.ssl_principal import InvalidMappingRule, NoMatchingRule, SslPrincipalMapper, subject_dn


def test_subject_dn_as_java_writes_it(tls_certs: Pki) -> None:  # noqa: F811
    assert subject_dn(tls_certs.client_der(name_of("CN=alice,OU=eng,O=acme"))) == "CN=alice,OU=eng,O=acme"
    assert subject_dn(tls_certs.client_der(name_of("CN=a,L=Paris,ST=IDF,C=FR,DC=example,UID=u1"))) == \
        "CN=a,L=Paris,ST=IDF,C=FR,DC=example,UID=u1"
    special = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, 'x=1; "q"'),
                         x509.NameAttribute(NameOID.COMMON_NAME, " #a,b+c<d>\\e ")])
    assert subject_dn(tls_certs.client_der(special)) == 'CN=\\ \\#a\\,b\\+c\\<d\\>\\\\e\\ ,O=x\\=1\\; \\"q\\"'
    # attributes without an RFC 2253 keyword: dotted OID and the hex of the value's DER encoding
    email = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bob"),
                       x509.NameAttribute(NameOID.EMAIL_ADDRESS, "bob@acme.io"),
                       x509.NameAttribute(NameOID.SERIAL_NUMBER, "42")])
    assert subject_dn(tls_certs.client_der(email)) == \
        "2.5.4.5=#13023432,1.2.840.113549.1.9.1=#160b626f624061636d652e696f,CN=bob"
    multi = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "x"),
                                                       x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "y")])])
    assert subject_dn(tls_certs.client_der(multi)) in ("CN=x+OU=y", "OU=y+CN=x")  # the DER set's order


def test_mapping_rules_of_kafkas_documentation() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
                                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
                                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
                                "DEFAULT")
    assert mapper.name("CN=kafka-broker1,OU=ServiceUsers,O=Acme,L=Here,ST=There,C=US") == "kafka-broker1"
    assert mapper.name("CN=Adam,OU=Engineering,O=Acme,L=Here,ST=There,C=US") == "adam@engineering"
    assert mapper.name("O=Acme,CN=Bob.Smith") == "bob.smith"
    assert mapper.name("OU=nobody") == "OU=nobody"
    assert SslPrincipalMapper("RULE:^CN=(.*?),.*$/$1/U").name("CN=alice,O=acme") == "ALICE"
    assert SslPrincipalMapper(None).name("CN=x,O=y") == "CN=x,O=y"
    # Java replacements: a group the pattern lacks is text, \\ escapes, named groups
    assert SslPrincipalMapper("RULE:^CN=([a-z]+)$/$1-$2/").name("CN=ab") == "ab-$2"
    assert SslPrincipalMapper("RULE:^CN=([a-z]+)$/\\$1 $1/").name("CN=ab") == "$1 ab"
    assert SslPrincipalMapper("RULE:^CN=(?<user>[a-z]+)$/${user}!/").name("CN=ab") == "ab!"
    assert SslPrincipalMapper("RULE:^CN=(.*)\\/x$/$1/").name("CN=a/x") == "a"  # an escaped slash in the pattern
    with pytest.raises(NoMatchingRule, match="No rules apply to OU=x, rules \\[RULE:\\^CN=\\(.\\*\\)\\$/\\$1/\\]"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")


@pytest.mark.parametrize("rules,message", [
    ("RULE:^CN=(.*)$/$1", "Invalid rule: `RULE:^CN=(.*)$/$1`"),
    ("NOTARULE", "Invalid rule: `NOTARULE`"),
    ("DEFAULT X", "Invalid rule: `DEFAULT X`, unmatched substring: `X`"),
    ("RULE:^CN=(.*$/$1/", "Invalid rule pattern"),
    ("RULE:^CN=x$/$1/", "No group 1"),
])
def test_invalid_mapping_rules(rules: str, message: str) -> None:
    with pytest.raises(InvalidMappingRule) as e:
        SslPrincipalMapper(rules)
    assert message in str(e.value)
    assert SslPrincipalMapper("DEFAULT,, ,").rules[0].text == "DEFAULT"  # empty rules are skipped
