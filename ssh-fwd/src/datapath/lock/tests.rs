use super::*;

fn root() -> (tempfile::TempDir, PinLayout) {
    let dir = tempfile::tempdir().unwrap();
    let layout = PinLayout::new(dir.path().join("ssh-fwd"));
    std::fs::create_dir(layout.root()).unwrap();
    (dir, layout)
}

/// The directory is made by the test already.
fn ok() -> anyhow::Result<()> {
    Ok(())
}

/// This process, as a holder names it.
fn me() -> String {
    format!("pid {}", std::process::id())
}

#[test]
fn a_held_directory_is_refused_naming_the_process_that_holds_it() {
    let (_dir, layout) = root();
    let _held = AgentLock::take(&layout, ok).unwrap();
    // Another open of the directory is another holder, even in this process.
    let holder = AgentLock::try_take(&layout).unwrap().unwrap_err();
    assert!(holder.to_string().starts_with(&me()), "{holder}");
    assert!(!holder.is_teardown());
    let e = AgentLock::take(&layout, ok).unwrap_err().to_string();
    assert!(
        e.contains("another ssh-fwd agent is running on --bpffs") && e.contains(&me()),
        "{e}"
    );
}

#[test]
fn a_lock_taken_for_a_teardown_is_held_until_dropped() {
    let (_dir, layout) = root();
    let lock = AgentLock::try_take(&layout).unwrap().unwrap();
    assert!(AgentLock::try_take(&layout).unwrap().is_err());
    drop(lock);
    assert!(AgentLock::try_take(&layout).unwrap().is_ok());
}

#[test]
fn a_directory_removed_and_made_again_is_locked_again() {
    let (_dir, layout) = root();
    let mut lock = AgentLock::take(&layout, ok).unwrap();
    assert!(!lock.follow_dir(&layout).unwrap(), "the same directory");
    std::fs::remove_dir(layout.root()).unwrap();
    std::fs::create_dir(layout.root()).unwrap();
    // Until the agent looks, the new directory is free for anyone.
    assert!(AgentLock::try_take(&layout).unwrap().is_ok());
    assert!(lock.follow_dir(&layout).unwrap(), "locked again");
    assert!(AgentLock::try_take(&layout).unwrap().is_err());
    assert!(!lock.follow_dir(&layout).unwrap());
}

#[test]
fn a_directory_made_again_and_locked_by_another_is_lost() {
    let (_dir, layout) = root();
    let mut lock = AgentLock::take(&layout, ok).unwrap();
    std::fs::remove_dir(layout.root()).unwrap();
    std::fs::create_dir(layout.root()).unwrap();
    let _other = AgentLock::take(&layout, ok).unwrap();
    let Err(FollowError::Lost(lost)) = lock.follow_dir(&layout) else {
        panic!("lost to the other holder");
    };
    assert!(lost.to_string().contains(&me()), "{lost}");
    assert!(lost.to_string().contains("this agent stops"), "{lost}");
}

#[test]
fn the_holder_is_read_from_proc_locks_by_device_and_inode() {
    let locks = "\
1: POSIX  ADVISORY  WRITE 900 00:2d:77 0 EOF
2: FLOCK  ADVISORY  WRITE 4711 00:2d:1234 0 EOF
2: -> FLOCK  ADVISORY  WRITE 4712 00:2d:1234 0 EOF
3: FLOCK  ADVISORY  WRITE 55 fd:01:1234 0 EOF
";
    let id = |major, minor, ino| DirId {
        dev: libc::makedev(major, minor),
        ino,
    };
    assert_eq!(lock_owner(locks, id(0, 0x2d, 1234)), Some(4711));
    assert_eq!(lock_owner(locks, id(0xfd, 1, 1234)), Some(55));
    assert_eq!(lock_owner(locks, id(0, 0x2d, 77)), None, "not a flock");
    assert_eq!(lock_owner(locks, id(0, 0x2e, 1234)), None);
}

#[test]
fn a_directory_removed_between_its_open_and_its_lock_is_not_the_one_kept_locked() {
    let (_dir, layout) = root();
    let path = layout.root().to_owned();
    let make = || Ok(std::fs::create_dir_all(&path)?);
    // A teardown finishes between the open and the lock: the directory
    // opened is gone, and the agent makes a new one.
    let mut removed = false;
    let lock = AgentLock::take_with(&layout, make, || {
        if !removed {
            std::fs::remove_dir(&path).unwrap();
            removed = true;
        }
    })
    .unwrap();
    std::fs::create_dir_all(&path).unwrap();
    assert!(removed);
    assert!(
        AgentLock::try_take(&layout).unwrap().is_err(),
        "the directory at the path is free: the agent locked the removed one"
    );
    drop(lock);
    assert!(AgentLock::try_take(&layout).unwrap().is_ok());
}
