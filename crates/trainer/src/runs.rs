//! Training runs left `running` by a trainer that was killed: how they are told
//! from runs still going, and the heartbeat that keeps a live run recognisable.
//!
//! The rule. A labelling run records its owner (pid, host name and a random
//! token of the process) and keeps `heartbeat_at` fresh (at most every
//! [`HEARTBEAT_EVERY`], on each measurement stored and each matrix done). When
//! a trainer starts labelling, every run still `running` is marked `interrupted`
//! when
//! - it was started on this host and its pid is no longer a live process, or
//!   that pid is this very process (the pid was reused: the token differs), or
//! - its last heartbeat (or its start, without one) is older than the staleness
//!   window (`--stale-run-minutes`, default [`DEFAULT_STALE_AFTER`]): this covers
//!   runs from another host, runs written before owners were recorded, and a
//!   pid reused by an unrelated process.
//!
//! Nothing measured is lost either way: every measurement is committed when it
//! is stored, and the new run skips the keys already in the database.

use anyhow::Result;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use store::{RunId, RunOwner, RunStatus, Store, TrainingRun};

/// How often a running run writes its heartbeat, at most.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);

/// A run without a heartbeat for this long is taken as abandoned whatever its pid.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(30 * 60);

/// This process as the owner of a run.
pub fn this_process() -> RunOwner {
    static TOKEN: OnceLock<String> = OnceLock::new();
    RunOwner {
        pid: std::process::id(),
        host: host_name(),
        token: TOKEN
            .get_or_init(|| format!("{:016x}", rand::random::<u64>()))
            .clone(),
    }
}

/// The machine's host name (empty when it cannot be read).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Whether a process with this id exists on this machine.
fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 checks for existence and permission, sending nothing.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    // EPERM: it exists but belongs to someone else.
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Why `run` counts as abandoned under the rule of this module, or `None` when
/// it may still be going.
pub fn abandoned_because(
    run: &TrainingRun,
    me: &RunOwner,
    stale_after: Duration,
) -> Option<String> {
    if run.status != RunStatus::Running || !run.is_unfinished() {
        return None;
    }
    if let Some(o) = run.owner.as_ref().filter(|o| o.host == me.host) {
        if o.pid == me.pid && o.token != me.token {
            return Some(format!("its pid {} is now this trainer's", o.pid));
        }
        if o.pid != me.pid && !pid_alive(o.pid) {
            return Some(format!("process {} on {} is gone", o.pid, o.host));
        }
    }
    (run.idle_s > stale_after.as_secs_f64())
        .then(|| format!("no heartbeat for {:.0} s", run.idle_s))
}

/// Marks every abandoned run `interrupted` (see the module's rule) and returns
/// their ids.
pub async fn interrupt_abandoned(
    store: &Store,
    me: &RunOwner,
    stale_after: Duration,
) -> Result<Vec<RunId>> {
    let mut marked = Vec::new();
    for run in store.unfinished_runs().await? {
        if let Some(why) = abandoned_because(&run, me, stale_after) {
            let note = format!(
                "interrupted: {why} (noticed by pid {} on {})",
                me.pid, me.host
            );
            if store.interrupt_abandoned_run(run.id, &note).await? {
                eprintln!("trainer: run {} marked interrupted: {why}", run.id);
                marked.push(run.id);
            }
        }
    }
    Ok(marked)
}

/// The heartbeat of a run: [`Heartbeat::beat`] writes it when
/// [`HEARTBEAT_EVERY`] has passed since the last write.
#[derive(Debug)]
pub struct Heartbeat {
    run: Option<RunId>,
    last: Mutex<Instant>,
}

impl Heartbeat {
    /// The heartbeat of `run` (`None`: beats do nothing).
    pub fn new(run: Option<RunId>) -> Heartbeat {
        Heartbeat {
            run,
            last: Mutex::new(Instant::now()),
        }
    }

    /// Writes the heartbeat when it is due.
    pub async fn beat(&self, store: &Store) -> Result<()> {
        let Some(run) = self.run else { return Ok(()) };
        let due = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.elapsed() >= HEARTBEAT_EVERY;
            if due {
                *last = Instant::now();
            }
            due
        };
        if due {
            store.heartbeat_run(run).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::RunRecord;

    fn run(owner: Option<RunOwner>, idle_s: f64) -> TrainingRun {
        TrainingRun {
            id: RunId(1),
            record: RunRecord {
                device: None,
                precision: None,
                params: serde_json::Value::Null,
                notes: String::new(),
            },
            status: RunStatus::Running,
            started_at: String::new(),
            finished_at: None,
            owner,
            heartbeat_at: None,
            idle_s,
        }
    }

    #[test]
    fn the_rule_tells_gone_reused_stale_and_live_runs_apart() {
        let me = this_process();
        let stale = Duration::from_secs(600);
        let with_pid = |pid: u32, host: &str, token: &str| RunOwner {
            pid,
            host: host.into(),
            token: token.into(),
        };
        // A process that has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let why = abandoned_because(&run(Some(with_pid(dead, &me.host, "x")), 1.0), &me, stale);
        assert!(why.unwrap().contains("is gone"));
        // This process's pid under another token: reused.
        let why = abandoned_because(&run(Some(with_pid(me.pid, &me.host, "x")), 1.0), &me, stale);
        assert!(why.unwrap().contains("this trainer's"));
        // A live process (this one's parent) with a fresh heartbeat: still going.
        let parent = std::os::unix::process::parent_id();
        let live = run(Some(with_pid(parent, &me.host, "x")), 1.0);
        assert_eq!(abandoned_because(&live, &me, stale), None);
        // ... but not once its heartbeat is stale.
        let old = run(Some(with_pid(parent, &me.host, "x")), 601.0);
        assert!(abandoned_because(&old, &me, stale)
            .unwrap()
            .contains("no heartbeat"));
        // Another host's pid is not checked here: only staleness counts.
        let other = run(Some(with_pid(dead, "elsewhere", "x")), 1.0);
        assert_eq!(abandoned_because(&other, &me, stale), None);
        assert!(abandoned_because(&run(None, 601.0), &me, stale).is_some());
        // Our own run, and finished runs, are never abandoned.
        assert_eq!(
            abandoned_because(&run(Some(me.clone()), 1e9), &me, Duration::MAX),
            None
        );
        let mut done = run(Some(with_pid(dead, &me.host, "x")), 1e9);
        done.status = RunStatus::Finished;
        done.finished_at = Some("t".into());
        assert_eq!(abandoned_because(&done, &me, stale), None);
    }
}
