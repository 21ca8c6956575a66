// SPDX-License-Identifier: Apache-2.0
//! Container names from cgroup paths: what a person calls the thing in a
//! cgroup. Pure string work on the conventions of the runtimes:
//!
//! - Docker, cgroupfs driver: `/docker/<64 hex>`; systemd driver:
//!   `/system.slice/docker-<64 hex>.scope`.
//! - containerd / CRI-O under Kubernetes: `/kubepods/<qos>/pod<uid>/<id>` or
//!   `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
//!   cri-containerd-<id>.scope` (`crio-<id>.scope` for CRI-O).
//! - Podman: `libpod-<id>.scope`.
//! - systemd: `<name>.service`, `<name>.scope`, `<name>.slice`.

/// The container (or pod, or service) a cgroup path belongs to, or its last
/// path component when no convention matches; `/` for the root.
///
/// ```
/// use topdeck_sched::container_name;
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
