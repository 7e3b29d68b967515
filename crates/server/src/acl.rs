//! Access control lists (Redis' ACL users): who may connect with which password, and which
//! commands, keys and pub/sub channels each user may use. Users live in memory on each node
//! (as in Redis without an `aclfile`); the `default` user is open, or has the server's
//! `requirepass` as its password. The rules are parsed by `commands::acl`, which knows the
//! command table and its categories; this module holds the users and answers checks.

use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// One user.
#[derive(Clone, Debug, Default)]
pub struct User {
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 (hex) of each password.
    pub passwords: BTreeSet<String>,
    /// Every command (`+@all`), or those of `allowed`.
    pub all_commands: bool,
    pub allowed: HashSet<String>,
    /// The command rules as given, for ACL GETUSER and LIST (`+@all`, `-@all +get`).
    pub command_rules: String,
    pub all_keys: bool,
    pub key_patterns: Vec<Vec<u8>>,
    pub all_channels: bool,
    pub channel_patterns: Vec<Vec<u8>>,
}

impl User {
    /// A new user as ACL SETUSER creates it: off, no password, no command, key or channel.
    pub fn new() -> User {
        User { command_rules: "-@all".into(), ..User::default() }
    }

    /// The `default` user: everything, with `requirepass` as its password if there is one.
    pub fn default_user(requirepass: Option<&str>) -> User {
        let mut u = User { enabled: true, all_commands: true, command_rules: "+@all".into(), ..User::default() };
        u.all_keys = true;
        u.all_channels = true;
        match requirepass {
            Some(p) => {
                u.passwords.insert(password_hash(p.as_bytes()));
            }
            None => u.nopass = true,
        }
        u
    }

    fn open(&self) -> bool {
        self.enabled && self.all_commands && self.all_keys && self.all_channels
    }
}

/// A password as users keep it: SHA-256, in hex.
pub fn password_hash(p: &[u8]) -> String {
    Sha256::digest(p).iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a command may not run.
#[derive(Debug, PartialEq)]
pub enum Denied {
    Command,
    Key,
    Channel,
}

/// The users of a server.
pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<User>>>,
    /// Whether the default user may do everything (the common case: no check is needed).
    open_default: AtomicBool,
}

impl Acl {
    pub fn new(requirepass: Option<&str>) -> Acl {
        let mut users = BTreeMap::new();
        users.insert("default".to_string(), Arc::new(User::default_user(requirepass)));
        Acl { users: RwLock::new(users), open_default: AtomicBool::new(true) }
    }

    pub fn get(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.users.read().keys().cloned().collect()
    }

    pub fn all(&self) -> Vec<(String, Arc<User>)> {
        self.users.read().iter().map(|(n, u)| (n.clone(), u.clone())).collect()
    }

    pub fn put(&self, name: &str, u: User) {
        if name == "default" {
            self.open_default.store(u.open(), Relaxed);
        }
        self.users.write().insert(name.to_string(), Arc::new(u));
    }

    /// Deletes users (never `default`); how many there were.
    pub fn delete(&self, names: &[String]) -> usize {
        let mut users = self.users.write();
        names.iter().filter(|n| n.as_str() != "default" && users.remove(n.as_str()).is_some()).count()
    }

    /// Whether `pass` logs in as `name`.
    pub fn authenticate(&self, name: &str, pass: &[u8]) -> bool {
        let Some(u) = self.get(name) else { return false };
        if !u.enabled {
            return false;
        }
        if u.nopass {
            return true;
        }
        let h = password_hash(pass);
        u.passwords.iter().any(|p| bool::from(subtle::ConstantTimeEq::ct_eq(p.as_bytes(), h.as_bytes())))
    }

    /// Whether the default user is open with no password (connections start authenticated).
    pub fn default_needs_no_password(&self) -> bool {
        self.get("default").is_some_and(|u| u.enabled && u.nopass)
    }

    /// Whether `user` (None: `default`) may run `cmd` on `keys` and `channels`, patterns
    /// matched by `glob`.
    pub fn check(
        &self,
        user: Option<&str>,
        cmd: &str,
        keys: &[&[u8]],
        channels: &[&[u8]],
        glob: fn(&[u8], &[u8]) -> bool,
    ) -> Result<(), Denied> {
        if user.is_none() && self.open_default.load(Relaxed) {
            return Ok(());
        }
        let Some(u) = self.get(user.unwrap_or("default")) else { return Err(Denied::Command) };
        if !u.all_commands && !u.allowed.contains(cmd) {
            return Err(Denied::Command);
        }
        if !u.all_keys && !keys.iter().all(|k| u.key_patterns.iter().any(|p| glob(p, k))) {
            return Err(Denied::Key);
        }
        if !u.all_channels && !channels.iter().all(|c| u.channel_patterns.iter().any(|p| glob(p, c))) {
            return Err(Denied::Channel);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &[u8], s: &[u8]) -> bool {
        p.strip_suffix(b"*").map_or(p == s, |pre| s.starts_with(pre))
    }

    #[test]
    fn users_are_checked_by_their_rules() {
        let acl = Acl::new(None);
        assert_eq!(acl.check(None, "flushall", &[], &[], glob), Ok(()));
        let mut bob = User::new();
        bob.enabled = true;
        bob.passwords.insert(password_hash(b"123"));
        bob.allowed.insert("set".into());
        bob.key_patterns.push(b"x*".to_vec());
        acl.put("bob", bob);
        assert!(acl.authenticate("bob", b"123") && !acl.authenticate("bob", b"124"));
        assert_eq!(acl.check(Some("bob"), "set", &[b"xx"], &[], glob), Ok(()));
        assert_eq!(acl.check(Some("bob"), "set", &[b"yy"], &[], glob), Err(Denied::Key));
        assert_eq!(acl.check(Some("bob"), "get", &[b"xx"], &[], glob), Err(Denied::Command));
        assert_eq!(acl.delete(&["bob".into(), "default".into()]), 1);
        assert!(!acl.authenticate("bob", b"123"));
    }
}
