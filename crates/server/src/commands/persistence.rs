//! SAVE, BGSAVE, LASTSAVE and SHUTDOWN. Halyard's store is always on disk: there is no
//! snapshot to write. SAVE makes every acknowledged write durable now and writes the memtables
//! out (what a client calling SAVE before a restart wants); BGSAVE does the same off the
//! connection; SHUTDOWN stops the server as SIGTERM does (a cluster node hands its primaries
//! off first; the store is flushed on the way out).

use super::args::lower;
use super::table::{Command, Keys, ATOMIC, NO_MULTI};
use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::atomic::Ordering::Relaxed;

#[rustfmt::skip]
pub(super) static COMMANDS: &[Command] = &[
    Command { name: "save", arity: 1, flags: NO_MULTI, keys: Keys::None, handler: cmd_save },
    Command { name: "bgsave", arity: -1, flags: 0, keys: Keys::None, handler: cmd_bgsave },
    Command { name: "lastsave", arity: 1, flags: 0, keys: Keys::None, handler: cmd_lastsave },
    // Runs while a script is busy (without the command gate), as SHUTDOWN NOSAVE does in Redis.
    Command { name: "shutdown", arity: -1, flags: NO_MULTI | ATOMIC, keys: Keys::None, handler: cmd_shutdown },
];

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn cmd_save(sh: &Shared, _: &mut Session, _: &[&[u8]]) -> Reply {
    let mut result = Ok(());
    (crate::native::off_worker_hook().0)(&mut || result = sh.ks.db.flush());
    match result {
        Ok(()) => {
            sh.settings.last_save.store(unix_now(), Relaxed);
            Reply::ok()
        }
        Err(e) => Reply::err(format!("ERR the store could not be made durable: {e}")),
    }
}

fn cmd_bgsave(sh: &Shared, _: &mut Session, a: &[&[u8]]) -> Reply {
    match a {
        [_] => {}
        [_, s] if lower(s) == "schedule" => {}
        _ => return super::args::syntax(),
    }
    let db = sh.ks.db.clone();
    let last = sh.settings.last_save.clone();
    std::thread::spawn(move || match db.flush() {
        Ok(()) => last.store(unix_now(), Relaxed),
        Err(e) => tracing::warn!("BGSAVE: the store could not be made durable: {e}"),
    });
    Reply::Simple("Background saving started".into())
}

fn cmd_lastsave(sh: &Shared, _: &mut Session, _: &[&[u8]]) -> Reply {
    Reply::Int(sh.settings.last_save.load(Relaxed) as i64)
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] | SHUTDOWN ABORT. The options about RDB snapshots and
/// replicas' catch-up change nothing here: every acknowledged write is already in the store's
/// log. The connection closes as the server stops, without a reply, as in Redis.
fn cmd_shutdown(sh: &Shared, sess: &mut Session, a: &[&[u8]]) -> Reply {
    let opts: Vec<String> = a.get(1..).unwrap_or_default().iter().map(|o| lower(o)).collect();
    if opts.iter().any(|o| !["nosave", "save", "now", "force", "abort"].contains(&o.as_str())) {
        return super::args::syntax();
    }
    if opts.iter().any(|o| o == "abort") {
        return Reply::err("ERR No shutdown in progress.");
    }
    sh.shutdown.notify_one();
    sess.replies = crate::state::Replies::Off;
    sess.quit = true;
    Reply::ok()
}
