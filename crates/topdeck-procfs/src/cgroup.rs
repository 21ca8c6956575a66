// SPDX-License-Identifier: Apache-2.0
//! Which container a process runs in, from its `/proc/<pid>/cgroup`: the
//! cgroup that names it ([`attribute`] on a hybrid host, the unified one
//! elsewhere), and what a person calls the thing in that cgroup
//! ([`container_name`]), by the conventions of the runtimes:
//!
//! - Docker, cgroupfs driver: `/docker/<64 hex>`; systemd driver:
//!   `/system.slice/docker-<64 hex>.scope`.
//! - containerd / CRI-O under Kubernetes: `/kubepods/<qos>/pod<uid>/<id>` or
//!   `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
//!   cri-containerd-<id>.scope` (`crio-<id>.scope` for CRI-O).
//! - Podman: `libpod-<id>.scope`.
//! - systemd: `<name>.service`, `<name>.scope`, `<name>.slice`.
//!
//! # Which hierarchy names a task on a hybrid host
//!
//! A hybrid host mounts the cpu controller as a v1 hierarchy and cgroup v2
//! (no controllers) beside it. A task is keyed by its v1 cpu cgroup when
//! that is not the v1 root (that is what the scheduler groups it by, and
//! where its quota lives); else by its v2 cgroup when that is not the v2
//! root; else it is in both roots: system. The scheduler probe applies
//! the same rule in the kernel.

/// Which cgroup a task is keyed by, from its `/proc/<pid>/cgroup` text on
/// a hybrid host: the user-space statement of the rule the scheduler probe
/// applies in `task_cgroup_id` (module documentation). Paths are as the file
/// gives them, relative to the reader's cgroup namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribution {
    /// Its v1 cpu cgroup, at this path in the cpu hierarchy.
    Cpu(String),
    /// Its v2 cgroup, at this path in the unified hierarchy.
    Unified(String),
    /// Both are roots: system.
    System,
}

/// The attribution of a task whose `/proc/<pid>/cgroup` reads `text`, on
/// a hybrid host. `None` when the text lists no v1 cpu hierarchy.
///
/// ```
/// use topdeck_procfs::cgroup::{attribute, Attribution};
/// let text = "4:cpu,cpuacct:/\n0::/system.slice/nginx.service\n";
/// assert_eq!(attribute(text), Some(Attribution::Unified("/system.slice/nginx.service".into())));
/// assert_eq!(attribute("0::/a\n"), None);
/// ```
pub fn attribute(text: &str) -> Option<Attribution> {
    let mut cpu = None;
    let mut unified = "/";
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.is_empty() {
            unified = path;
        } else if controllers.split(',').any(|c| c == "cpu") {
            cpu = Some(path);
        }
    }
    Some(match cpu? {
        "/" if unified == "/" => Attribution::System,
        "/" => Attribution::Unified(unified.to_string()),
        p => Attribution::Cpu(p.to_string()),
    })
}

/// The container `pid` runs in: the name ([`container_name`]) of the
/// cgroup its `/proc/<pid>/cgroup` keys it by ([`container_of_text`]).
/// `None` when it is in the root cgroup (the system itself), is gone, or
/// the file cannot be read.
///
/// ```
/// // Test harnesses run in whatever cgroup started them: a name or none,
/// // but the same for this process and its own pid.
/// let mine = topdeck_procfs::cgroup::container_of(std::process::id());
/// let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
/// assert_eq!(mine, topdeck_procfs::cgroup::container_of_text(&text));
/// ```
pub fn container_of(pid: u32) -> Option<String> {
    container_of_text(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// The container a `/proc/<pid>/cgroup` text names: on a hybrid host (a
/// v1 cpu hierarchy), the cgroup [`attribute`] keys the task by; else its
/// unified (v2, `0::`) cgroup. `None` for the root cgroup, which is the
/// system's, and for a text naming neither.
///
/// ```
/// use topdeck_procfs::cgroup::container_of_text;
/// assert_eq!(container_of_text("0::/system.slice/redis.service\n").as_deref(), Some("redis.service"));
/// assert_eq!(container_of_text("4:cpu,cpuacct:/box\n0::/\n").as_deref(), Some("box"));
/// assert_eq!(container_of_text("4:cpu,cpuacct:/\n0::/\n"), None);
/// ```
pub fn container_of_text(text: &str) -> Option<String> {
    let path = cgroup_of_text(text)?;
    (path != "/").then(|| container_name(&path))
}

/// The cgroup path a `/proc/<pid>/cgroup` text keys its task by, as the
/// scheduler probe labels it: on a hybrid host the one [`attribute`]
/// picks, else the unified (`0::`) one; `/` for the system (both roots).
/// `None` for a text naming neither.
///
/// ```
/// use topdeck_procfs::cgroup::cgroup_of_text;
/// assert_eq!(cgroup_of_text("4:cpu,cpuacct:/box\n0::/\n").as_deref(), Some("/box"));
/// assert_eq!(cgroup_of_text("4:cpu,cpuacct:/\n0::/\n").as_deref(), Some("/"));
/// assert_eq!(cgroup_of_text("0::/system.slice/x.service\n").as_deref(), Some("/system.slice/x.service"));
/// ```
pub fn cgroup_of_text(text: &str) -> Option<String> {
    Some(match attribute(text) {
        Some(Attribution::Cpu(p) | Attribution::Unified(p)) => p,
        Some(Attribution::System) => "/".to_owned(),
        None => text.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned(),
    })
}

/// [`cgroup_of_text`] of `/proc/<pid>/cgroup`; `None` when it cannot be read.
pub fn cgroup_of(pid: u32) -> Option<String> {
    cgroup_of_text(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// The container (or pod, or service) a cgroup path belongs to, or its last
/// path component when no convention matches; `/` for the root.
///
/// ```
/// use topdeck_procfs::cgroup::container_name;
/// let id = "0123456789abcdef".repeat(4);
/// assert_eq!(container_name(&format!("/docker/{id}")), "docker:0123456789ab");
/// assert_eq!(container_name("/system.slice/nginx.service"), "nginx.service");
/// assert_eq!(container_name("/"), "/");
/// ```
pub fn container_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some(last) = parts.last() else {
        return "/".to_string();
    };
    if let Some(pod) = parts.iter().find_map(|p| pod_uid(p)) {
        return match container_id(last) {
            Some((_, id)) => format!("pod:{pod}/{}", short(id)),
            None => format!("pod:{pod}"),
        };
    }
    if parts.len() >= 2 && parts[parts.len() - 2] == "docker" && is_hex_id(last) {
        return format!("docker:{}", short(last));
    }
    if let Some((runtime, id)) = container_id(last) {
        return format!("{runtime}:{}", short(id));
    }
    last.to_string()
}

/// `(runtime, id)` of a systemd scope or bare directory named after a
/// container id.
fn container_id(component: &str) -> Option<(&'static str, &str)> {
    const SCOPES: &[(&str, &str)] = &[
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
        ("libpod-", "podman"),
    ];
    let stem = component.strip_suffix(".scope").unwrap_or(component);
    for (prefix, runtime) in SCOPES {
        if let Some(id) = stem.strip_prefix(prefix) {
            if is_hex_id(id) {
                return Some((runtime, id));
            }
        }
    }
    // Kubernetes with the cgroupfs driver: the container directory is the bare id.
    is_hex_id(component).then_some(("container", component))
}

/// The pod uid of `pod<uid>` or `kubepods-<qos>-pod<uid>.slice`, with the
/// systemd driver's underscores turned back into dashes.
fn pod_uid(component: &str) -> Option<String> {
    let stem = component.strip_suffix(".slice").unwrap_or(component);
    let at = stem.rfind("pod")?;
    let uid = &stem[at + 3..];
    let plausible = uid.len() >= 32
        && uid
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
    plausible.then(|| uid.replace('_', "-"))
}

fn is_hex_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribution_prefers_the_v1_cpu_group_then_the_v2_group_then_system() {
        let proc = |cpu: &str, v2: &str| {
            format!("12:pids:/x\n4:cpu,cpuacct:{cpu}\n1:name=systemd:{v2}\n0::{v2}\n")
        };
        // A runtime's systemd driver: its own group in both.
        let scope = "/system.slice/docker-ab.scope";
        assert_eq!(
            attribute(&proc(scope, scope)),
            Some(Attribution::Cpu(scope.into()))
        );
        // Distinct groups: v1 cpu wins, it is where the quota is.
        assert_eq!(
            attribute(&proc("/a", "/b")),
            Some(Attribution::Cpu("/a".into()))
        );
        // A service without CPU accounting: v1 cpu root, its own v2 group.
        assert_eq!(
            attribute(&proc("/", "/system.slice/nginx.service")),
            Some(Attribution::Unified("/system.slice/nginx.service".into()))
        );
        assert_eq!(attribute(&proc("/", "/")), Some(Attribution::System));
        // No v2 line at all (v2 not mounted anywhere): the v2 root.
        assert_eq!(attribute("4:cpu,cpuacct:/\n"), Some(Attribution::System));
        // cpuset is not cpu, and v2 alone is not a hybrid host.
        assert_eq!(attribute("3:cpuset:/a\n0::/b\n"), None);
    }

    #[test]
    fn containers_come_from_the_keyed_cgroup_and_the_root_is_none() {
        assert_eq!(
            container_of_text("4:cpu,cpuacct:/\n0::/system.slice/docker-ab.scope\n").as_deref(),
            Some("docker-ab.scope")
        );
        assert_eq!(container_of_text("0::/\n"), None);
        assert_eq!(container_of_text(""), None);
        assert_eq!(container_of_text("garbage"), None);
        assert_eq!(
            container_of_text(&format!("3:cpu:/docker/{ID}\n0::/\n")).as_deref(),
            Some("docker:3f2a9c1b5d7e")
        );
    }

    const ID: &str = "3f2a9c1b5d7e4f60a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcdef01";

    #[test]
    fn docker_with_either_cgroup_driver() {
        assert_eq!(
            container_name(&format!("/docker/{ID}")),
            "docker:3f2a9c1b5d7e"
        );
        assert_eq!(
            container_name(&format!("/system.slice/docker-{ID}.scope")),
            "docker:3f2a9c1b5d7e"
        );
    }

    #[test]
    fn kubernetes_pods_and_their_containers() {
        let uid = "5b1f0c3e-8a2d-4c6b-9e7f-0a1b2c3d4e5f";
        assert_eq!(
            container_name(&format!("/kubepods/burstable/pod{uid}/{ID}")),
            format!("pod:{uid}/3f2a9c1b5d7e")
        );
        let sd = uid.replace('-', "_");
        assert_eq!(
            container_name(&format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{sd}.slice/cri-containerd-{ID}.scope"
            )),
            format!("pod:{uid}/3f2a9c1b5d7e")
        );
        assert_eq!(
            container_name(&format!("/kubepods.slice/kubepods-pod{sd}.slice")),
            format!("pod:{uid}")
        );
    }

    #[test]
    fn podman_crio_and_containerd_scopes() {
        assert_eq!(
            container_name(&format!("/machine.slice/libpod-{ID}.scope")),
            "podman:3f2a9c1b5d7e"
        );
        assert_eq!(
            container_name(&format!("/crio-{ID}.scope")),
            "crio:3f2a9c1b5d7e"
        );
        assert_eq!(
            container_name(&format!("/system.slice/cri-containerd-{ID}.scope")),
            "containerd:3f2a9c1b5d7e"
        );
    }

    #[test]
    fn systemd_units_and_plain_groups_keep_their_name() {
        assert_eq!(
            container_name("/system.slice/nginx.service"),
            "nginx.service"
        );
        assert_eq!(
            container_name("/user.slice/user-1000.slice/session-2.scope"),
            "session-2.scope"
        );
        assert_eq!(container_name("/topdeck-test/victim"), "victim");
        assert_eq!(container_name("/"), "/");
        assert_eq!(container_name(""), "/");
    }

    #[test]
    fn near_misses_are_not_containers() {
        assert_eq!(container_name("/docker/abc"), "abc");
        assert_eq!(
            container_name("/system.slice/docker-abc.scope"),
            "docker-abc.scope"
        );
        assert_eq!(container_name("/podcast.slice"), "podcast.slice");
    }
}
