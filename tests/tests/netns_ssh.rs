//! The multi-host test bed itself: three network-namespace hosts, each with an sshd;
//! host 1 reaches hosts 2 and 3 over ssh (root, by key) and sees their addresses.
//! Prints `skipped: <reason>` where network namespaces are not available.

use dynres_tests::netns::Hosts;

#[test]
fn host_one_reaches_the_others_over_ssh() {
    let hosts = match Hosts::up(3) {
        Ok(h) => h,
        Err(skip) => {
            dynres_tests::skip(&skip.0);
            return;
        }
    };
    assert!(hosts.ssh_config().exists(), "no ssh config");
    for to in [2, 3] {
        let out = hosts.ssh(1, to, "hostname -I");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ssh from host 1 to host {to}: exit {:?}\n{}{}",
            out.status.code(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let addrs: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(addrs, [hosts.addr(to)], "host {to}'s addresses");
    }
    // Inside a host, only its own address shows.
    let me = hosts.exec(2, &["hostname", "-I"]);
    assert_eq!(String::from_utf8_lossy(&me.stdout).trim(), hosts.addr(2));
}
