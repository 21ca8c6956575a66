// SPDX-License-Identifier: Apache-2.0
//! Mapping real arrays (made by `testing`), and refusing the wrong ones.

use std::os::unix::fs::PermissionsExt;

use super::testing::{pid_max, TestArray};
use super::*;

#[test]
fn a_real_array_maps_and_reads_with_plain_loads() {
    let Some(a) = TestArray::create(pid_max()) else {
        return;
    };
    a.set_total(7, 1_500);
    a.add_wait(7, 500);
    let w = ThreadWaits::open(a.pin()).unwrap();
    assert_eq!(w.state(), State::Live);
    assert_eq!(w.tids(), pid_max());
    assert_eq!(w.agent_pid(), std::process::id());
    assert!(w.started_ns() > 0);
    let s = w.slot(7).unwrap();
    assert_eq!((s.total, s.other, s.own), (2_000, 500, 0));
    assert_eq!(w.slot(8).unwrap(), Waits::default());
    assert_eq!(w.slot(pid_max()), None, "past the last slot");
    assert_eq!(w.slot(u32::MAX), None);
    // Writes after mapping show through: the same pages.
    a.add_wait(7, 1);
    assert_eq!(w.slot_total(7).unwrap().load(Relaxed), 2_001);
    a.set_state(fmt_waits::GONE);
    assert_eq!(w.state(), State::Gone);
    assert!(format!("{w:?}").contains("Gone"));
}

#[test]
fn nothing_pinned_is_not_found_and_open_if_pinned_says_none() {
    let Some(a) = TestArray::create(16) else {
        return;
    };
    a.unpin();
    let err = ThreadWaits::open(a.pin()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string().contains(&a.pin().display().to_string()),
        "{err}"
    );
    assert!(ThreadWaits::open_if_pinned(a.pin()).unwrap().is_none());
    let missing_dir = Path::new("/sys/fs/bpf/topdeck-unit-no-such-dir/thread_waits");
    assert!(ThreadWaits::open_if_pinned(missing_dir).unwrap().is_none());
}

#[test]
fn a_pin_in_a_directory_others_could_write_is_refused() {
    use std::os::unix::fs::chown;
    let Some(a) = TestArray::create(16) else {
        return;
    };
    chown(a.dir(), Some(65534), None).unwrap();
    let err = ThreadWaits::open(a.pin()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeDirectory, "{err}");
    assert!(err.to_string().contains("uid 65534"), "{err}");
    assert!(
        err.to_string().contains(&a.pin().display().to_string()),
        "{err}"
    );
    chown(a.dir(), Some(0), None).unwrap();
    for mode in [0o775, 0o757, 0o1777] {
        std::fs::set_permissions(a.dir(), std::fs::Permissions::from_mode(mode)).unwrap();
        let err = ThreadWaits::open(a.pin()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeDirectory, "{mode:o}: {err}");
    }
    std::fs::set_permissions(a.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    ThreadWaits::open(a.pin()).unwrap();
}

#[test]
fn maps_of_the_wrong_shape_are_refused_with_what_is_wrong() {
    let cases: [(u32, u32, u32, &str); 3] = [
        (8, 64, bpf::BPF_F_MMAPABLE, "value size 8"),
        (32, 64, 0, "BPF_F_MMAPABLE"),
        (32, 2, bpf::BPF_F_MMAPABLE, "too few"),
    ];
    for (value_size, entries, flags, says) in cases {
        let a = match TestArray::create_raw(value_size, entries, flags) {
            Ok(a) => a,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        let err = ThreadWaits::open(a.pin()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(says) && msg.contains(fmt_waits::PIN_ENV),
            "{msg}"
        );
        assert!(msg.starts_with(&a.pin().display().to_string()), "{msg}");
    }
}

#[test]
fn a_header_of_another_magic_or_version_is_refused_an_unwritten_one_is_not_set_up() {
    let a = match TestArray::create_raw(32, 64, bpf::BPF_F_MMAPABLE) {
        Ok(a) => a,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let w = ThreadWaits::open(a.pin()).unwrap();
    assert_eq!(w.state(), State::NotSetUp);
    a.write_header();
    a.set_magic(0x1234_5678);
    let err = ThreadWaits::open(a.pin()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("magic"), "{err}");
    a.write_header();
    a.set_state(fmt_waits::LIVE);
    a.set_version(9);
    let err = ThreadWaits::open(a.pin()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsupportedVersion, "{err}");
}

/// Runs `test` (an `#[ignore]`d test of this binary) in a child process
/// with `TOPDECK_THREAD_WAITS` set: the environment is process-global, and
/// other tests create registries that read it.
pub(crate) fn in_child_with_env(test: &str, value: &Path) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(fmt_waits::PIN_ENV, value)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test}: {text}"
    );
}

#[test]
fn the_environment_names_the_pin_or_turns_it_off() {
    let Some(a) = TestArray::create(16) else {
        return;
    };
    in_child_with_env(
        "waits::tests::child_sees_the_pin_from_the_environment",
        a.pin(),
    );
    in_child_with_env("waits::tests::child_sees_off", Path::new("off"));
}

#[test]
#[ignore = "run by the_environment_names_the_pin_or_turns_it_off, in a child"]
fn child_sees_the_pin_from_the_environment() {
    let pin = pin_from_env().unwrap();
    assert!(pin.starts_with(testing::BPFFS), "{pin:?}");
    let w = ThreadWaits::from_env().expect("the pin the environment names");
    assert_eq!(w.path(), pin);
}

#[test]
#[ignore = "run by the_environment_names_the_pin_or_turns_it_off, in a child"]
fn child_sees_off() {
    assert_eq!(pin_from_env(), None);
    assert!(ThreadWaits::from_env().is_none());
    assert!(ThreadWaits::try_from_env().unwrap().is_none());
}
