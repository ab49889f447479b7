import Testing

@testable import TaskServer

/// CIDR parsing and the outbound address policy's decision rule (pure, no I/O).
struct AddressPolicyTests {
    @Test(arguments: [
        ("169.254.0.0/16", "169.254.0.0/16"), ("10.1.2.3", "10.1.2.3/32"), ("10.1.2.3/8", "10.0.0.0/8"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("fe80::/10", "fe80::/10"), ("::1", "::1/128"), ("fd00:ec2::254/128", "fd00:ec2::254/128"),
        ("2001:db8::7/32", "2001:db8::/32"),
    ])
    func cidrsParseAndNormalise(text: String, normalised: String) {
        #expect(CIDR(text)?.description == normalised)
    }

    @Test(arguments: [
        "", "10.0.0.0/33", "::/129", "10.0.0/8", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "example.com", "fe80::/1x",
        " 10.0.0.0/8",
    ])
    func malformedCIDRsAreRejected(text: String) {
        #expect(CIDR(text) == nil)
    }

    func decision(_ policy: AddressPolicy, _ address: String) -> AddressPolicy.Decision {
        policy.decision(for: IPAddress.parse(address)!)
    }

    @Test func linkLocalAndMetadataAddressesAreDeniedByDefaultAndLoopbackIsAllowed() {
        let policy = AddressPolicy()
        for address in [
            "169.254.169.254", "169.254.0.1", "fe80::1", "febf::1", "100.100.100.200", "fd00:ec2::254", "168.63.129.16",
            "192.0.0.192",
            "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
        ] {
            #expect(decision(policy, address) != .allowed, "\(address)")
        }
        for address in [
            "127.0.0.1", "::1", "10.0.0.1", "192.168.1.1", "100.100.100.201", "fec0::1", "8.8.8.8", "::ffff:127.0.0.1",
        ] {
            #expect(decision(policy, address) == .allowed, "\(address)")
        }
        #expect(decision(policy, "169.254.169.254") == .denied(rule: "built-in rule 169.254.0.0/16"))
    }

    @Test func theUnrestrictedPolicyAllowsEveryAddress() {
        for address in [
            "169.254.169.254", "fe80::1", "100.100.100.200", "fd00:ec2::254", "168.63.129.16", "192.0.0.192",
            "::ffff:169.254.169.254", "127.0.0.1", "::1", "10.0.0.1", "192.168.1.1", "8.8.8.8",
        ] {
            #expect(decision(.unrestricted, address) == .allowed, "\(address)")
        }
    }

    @Test func theMostSpecificRangeWinsAndDenyWinsATie() {
        // Allow re-opens a default-denied range; a narrower deny inside it closes part again.
        let policy = AddressPolicy(
            allow: [CIDR("169.254.0.0/16")!, CIDR("127.0.0.1/32")!, CIDR("10.0.0.0/8")!],
            deny: [CIDR("169.254.169.254/32")!, CIDR("127.0.0.0/8")!, CIDR("10.0.0.0/8")!]
        )
        #expect(decision(policy, "169.254.1.1") == .allowed)
        #expect(decision(policy, "169.254.169.254") == .denied(rule: "--outbound-deny 169.254.169.254/32"))
        #expect(decision(policy, "127.0.0.1") == .allowed)
        #expect(decision(policy, "127.0.0.2") == .denied(rule: "--outbound-deny 127.0.0.0/8"))
        #expect(decision(policy, "10.9.9.9") == .denied(rule: "--outbound-deny 10.0.0.0/8"))
    }

    @Test func denyEverythingButLoopbackMakesAnAllowList() {
        let policy = AddressPolicy(
            allow: [CIDR("127.0.0.0/8")!, CIDR("::1")!],
            deny: [CIDR("0.0.0.0/0")!, CIDR("::/0")!]
        )
        #expect(decision(policy, "127.0.0.1") == .allowed)
        #expect(decision(policy, "::1") == .allowed)
        #expect(decision(policy, "10.0.0.1") == .denied(rule: "--outbound-deny 0.0.0.0/0"))
        #expect(decision(policy, "2001:db8::1") == .denied(rule: "--outbound-deny ::/0"))
        #expect(decision(policy, "169.254.169.254") == .denied(rule: "built-in rule 169.254.0.0/16"))
    }
}
