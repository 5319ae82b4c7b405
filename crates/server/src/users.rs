//! ACL users: who may authenticate, with which passwords, and what they may touch.
//!
//! The subset of Redis's ACL this server enforces grants each user all commands or none
//! (`+@all`/`allcommands`, `-@all`/`nocommands`), all keys or none (`~*`/`allkeys`,
//! `resetkeys`) and all channels or none (`&*`/`allchannels`, `resetchannels`). Finer rules
//! (`+get`, `-@dangerous`, `~app:*`, `%R~*`, selectors) are refused with a clear error rather than
//! accepted and ignored: a rule meant to restrict a user must never leave it broader than asked.
//!
//! Users live in memory, as in Redis without an ACL file: `default` is built from
//! `--requirepass` at start (on, its one password, or `nopass` without one), others come from
//! ACL SETUSER and are gone after a restart. Passwords are kept as SHA-256 digests only.
//!
//! Invariants: the `default` user always exists; a user holds at most
//! `PASSWORDS_PER_USER_MAX` passwords and the server at most `USERS_MAX` users; `nopass` and
//! passwords exclude each other (each rule clears the other, as in Redis); every change bumps
//! `Users::epoch`, which sessions compare to refresh the permissions they cache.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use crate::command::{CommandSpec, BEFORE_AUTH};
use crate::commands;
use crate::shared::ClientHandle;

pub const DEFAULT_USER: &str = "default";
/// Users the server holds at most (ACL SETUSER of one more is refused).
pub const USERS_MAX: usize = 10_000;
/// Passwords one user holds at most.
pub const PASSWORDS_PER_USER_MAX: usize = 64;
/// Entries ACL LOG keeps (Redis's `acllog-max-len` default).
pub const ACL_LOG_ENTRIES_MAX: usize = 128;
/// A denial repeating an entry's reason, context, object and user within this long counts on
/// that entry instead of adding one (Redis's grouping window).
const ACL_LOG_GROUPING_MS: u128 = 60_000;
/// Bytes of a password digest.
const DIGEST_BYTES: usize = 32;

/// What a user may touch: everything of a kind or nothing of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Permissions {
    pub all_commands: bool,
    pub all_keys: bool,
    pub all_channels: bool,
}

impl Permissions {
    pub const EVERYTHING: Permissions = Permissions { all_commands: true, all_keys: true, all_channels: true };
}

/// Why a command is refused to a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// The command (its name, `container|subcommand` for a subcommand).
    Command(String),
    /// The first key argument.
    Key(Bytes),
    /// The first channel argument.
    Channel(Bytes),
}

impl Denial {
    /// Redis's error reply for the denial at the top level or in MULTI.
    pub fn error_text(&self) -> String {
        match self {
            Denial::Command(name) => format!("NOPERM this user has no permissions to run the '{name}' command"),
            Denial::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".to_string(),
            Denial::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".to_string(),
        }
    }

    /// ACL DRYRUN's answer for the denial.
    pub fn dry_run_text(&self) -> String {
        match self {
            Denial::Command(name) => format!("This user has no permissions to run the '{name}' command"),
            Denial::Key(key) => format!("This user has no permissions to access the '{}' key", String::from_utf8_lossy(key)),
            Denial::Channel(channel) => format!("This user has no permissions to access the '{}' channel", String::from_utf8_lossy(channel)),
        }
    }

    /// The error a script's `redis.call` raises for the denial.
    pub fn script_error_text(&self) -> &'static str {
        match self {
            Denial::Command(_) => "ERR The user executing the script can't run this command or subcommand",
            Denial::Key(_) => "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments",
            Denial::Channel(_) => "ERR The user executing the script can't publish to the channel mentioned in the command",
        }
    }

    fn reason_and_object(&self) -> (&'static str, Bytes) {
        match self {
            Denial::Command(name) => ("command", Bytes::from(name.clone())),
            Denial::Key(key) => ("key", key.clone()),
            Denial::Channel(channel) => ("channel", channel.clone()),
        }
    }
}

/// Commands whose arguments after the name (or after the first, for SPUBLISH's and PUBLISH's
/// message) are channels or patterns that `&*` governs.
fn channels_of<'a>(name: &str, args: &'a [Bytes]) -> &'a [Bytes] {
    match name {
        "publish" | "spublish" => args.get(1..2).unwrap_or_default(),
        "subscribe" | "psubscribe" | "ssubscribe" => args.get(1..).unwrap_or_default(),
        _ => &[],
    }
}

impl Permissions {
    /// Whether these permissions let `spec` run with `args` (whose arity is already checked).
    /// Commands that run before authentication (AUTH, HELLO, QUIT) are never refused, as in
    /// Redis.
    pub fn check(&self, spec: &'static CommandSpec, args: &[Bytes]) -> Result<(), Denial> {
        if *self == Permissions::EVERYTHING || spec.has(BEFORE_AUTH) {
            return Ok(());
        }
        if !self.all_commands {
            return Err(Denial::Command(commands::full_name(spec, args).to_string()));
        }
        if !self.all_keys {
            if let Some(key) = spec.keys.keys(args).first() {
                return Err(Denial::Key(Bytes::copy_from_slice(key)));
            }
        }
        if !self.all_channels {
            if let Some(channel) = channels_of(spec.name, args).first() {
                return Err(Denial::Channel(channel.clone()));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    enabled: bool,
    nopass: bool,
    passwords: Vec<[u8; DIGEST_BYTES]>,
    permissions: Permissions,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false) when set: shown, not acted on
    /// (RESTORE checks every payload here).
    sanitize_payload: Option<bool>,
}

/// Why ACL SETUSER refused a rule (the text after "Error in ACL SETUSER modifier '…': ").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleError {
    Syntax,
    HashFormat,
    PasswordNotFound,
    PatternAfterAll,
    TooManyPasswords,
    /// A rule Redis knows that grants or removes part of a kind (one command, a category, a
    /// key pattern, a selector): this server grants all of a kind or none.
    Partial,
}

impl RuleError {
    pub fn text(&self) -> String {
        match self {
            RuleError::Syntax => "Syntax error".to_string(),
            RuleError::HashFormat => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters".to_string(),
            RuleError::PasswordNotFound => "The password you are trying to remove from the user does not exist".to_string(),
            RuleError::PatternAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns".to_string(),
            RuleError::TooManyPasswords => format!("a user holds at most {PASSWORDS_PER_USER_MAX} passwords here"),
            RuleError::Partial => "this server grants a user all commands or none (+@all, -@all), all keys or none (~*, resetkeys) and all channels or none (&*, resetchannels); finer rules are not supported".to_string(),
        }
    }
}

impl User {
    /// A new user as ACL SETUSER creates it: off, no password, nothing permitted.
    fn new() -> User {
        User { enabled: false, nopass: false, passwords: Vec::new(), permissions: Permissions::default(), sanitize_payload: None }
    }

    /// The default user: on, everything permitted, `nopass` or the one password.
    fn default_with(password: Option<&str>) -> User {
        let mut user = User { enabled: true, permissions: Permissions::EVERYTHING, ..User::new() };
        user.set_only_password(password);
        user
    }

    /// Replaces the passwords with `password`, or with `nopass` when None (CONFIG SET requirepass).
    fn set_only_password(&mut self, password: Option<&str>) {
        self.passwords = password.map(|password| digest_of(password.as_bytes())).into_iter().collect();
        self.nopass = password.is_none();
    }

    pub fn permissions(&self) -> Permissions {
        self.permissions
    }

    /// Whether a client may authenticate as this user with `password`.
    pub fn accepts(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let given = digest_of(password);
        // Every digest compared in full, whichever matches: the time does not tell which.
        self.passwords.iter().fold(false, |found, stored| found | same_digest(stored, &given))
    }

    /// Whether a new connection starts authenticated as this user (the default user on, with
    /// `nopass`).
    pub fn needs_no_password(&self) -> bool {
        self.enabled && self.nopass
    }

    /// Applies one ACL SETUSER rule.
    fn apply(&mut self, rule: &[u8]) -> Result<(), RuleError> {
        let text = std::str::from_utf8(rule).map_err(|_| RuleError::Syntax)?;
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => (self.nopass, self.passwords) = (true, Vec::new()),
            "resetpass" => (self.nopass, self.passwords) = (false, Vec::new()),
            "allcommands" | "+@all" => self.permissions.all_commands = true,
            "nocommands" | "-@all" => self.permissions.all_commands = false,
            "allkeys" | "~*" => self.permissions.all_keys = true,
            "resetkeys" => self.permissions.all_keys = false,
            "allchannels" | "&*" => self.permissions.all_channels = true,
            "resetchannels" => self.permissions.all_channels = false,
            "sanitize-payload" => self.sanitize_payload = Some(true),
            "skip-sanitize-payload" => self.sanitize_payload = Some(false),
            "reset" => *self = User { sanitize_payload: Some(true), ..User::new() },
            "clearselectors" => {}
            _ => return self.apply_with_argument(text),
        }
        Ok(())
    }

    /// The rules that carry an argument after their first character: passwords, their hashes,
    /// and the patterns and command rules this server does not support.
    fn apply_with_argument(&mut self, rule: &str) -> Result<(), RuleError> {
        let Some(first) = rule.chars().next() else { return Err(RuleError::Syntax) };
        let argument = &rule[first.len_utf8()..];
        match first {
            '>' => self.add_password(digest_of(argument.as_bytes())),
            '#' => self.add_password(parse_digest(argument)?),
            '<' => self.remove_password(&digest_of(argument.as_bytes())),
            '!' => self.remove_password(&parse_digest(argument)?),
            '~' | '%' if self.permissions.all_keys => Err(RuleError::PatternAfterAll),
            '~' | '%' | '&' | '+' | '-' | '(' => Err(RuleError::Partial),
            _ => Err(RuleError::Syntax),
        }
    }

    fn add_password(&mut self, digest: [u8; DIGEST_BYTES]) -> Result<(), RuleError> {
        self.nopass = false;
        if !self.passwords.contains(&digest) {
            if self.passwords.len() >= PASSWORDS_PER_USER_MAX {
                return Err(RuleError::TooManyPasswords);
            }
            self.passwords.push(digest);
        }
        Ok(())
    }

    fn remove_password(&mut self, digest: &[u8; DIGEST_BYTES]) -> Result<(), RuleError> {
        let before = self.passwords.len();
        self.passwords.retain(|stored| stored != digest);
        if self.passwords.len() == before {
            return Err(RuleError::PasswordNotFound);
        }
        Ok(())
    }

    /// The flags ACL GETUSER lists, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// The password digests as lowercase hex, in the order added.
    pub fn password_hashes(&self) -> Vec<String> {
        self.passwords.iter().map(|digest| digest.iter().map(|byte| format!("{byte:02x}")).collect()).collect()
    }

    pub fn commands_rule(&self) -> &'static str {
        if self.permissions.all_commands { "+@all" } else { "-@all" }
    }

    /// `~*` or "" (no key pattern).
    pub fn keys_rule(&self) -> &'static str {
        if self.permissions.all_keys { "~*" } else { "" }
    }

    /// `&*` or "" (no channel pattern), as ACL GETUSER shows it.
    pub fn channels_rule(&self) -> &'static str {
        if self.permissions.all_channels { "&*" } else { "" }
    }

    /// The user as one line of ACL LIST: `user <name> <flags> <#hashes> <keys> <channels> <commands>`.
    pub fn describe(&self, name: &[u8]) -> String {
        let mut words = vec!["user".to_string(), String::from_utf8_lossy(name).into_owned()];
        words.extend(self.flags().into_iter().map(str::to_string));
        words.extend(self.password_hashes().into_iter().map(|hash| format!("#{hash}")));
        if self.permissions.all_keys {
            words.push("~*".to_string());
        }
        words.push(if self.permissions.all_channels { "&*" } else { "resetchannels" }.to_string());
        words.push(self.commands_rule().to_string());
        words.join(" ")
    }
}

fn digest_of(password: &[u8]) -> [u8; DIGEST_BYTES] {
    Sha256::digest(password).into()
}

fn same_digest(a: &[u8; DIGEST_BYTES], b: &[u8; DIGEST_BYTES]) -> bool {
    a.iter().zip(b).fold(0u8, |difference, (x, y)| difference | (x ^ y)) == 0
}

/// A `#`/`!` rule's digest: exactly 64 lowercase hex characters.
fn parse_digest(hex: &str) -> Result<[u8; DIGEST_BYTES], RuleError> {
    let lowercase_hex = |byte: &u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(byte);
    if hex.len() != 2 * DIGEST_BYTES || !hex.as_bytes().iter().all(lowercase_hex) {
        return Err(RuleError::HashFormat);
    }
    let mut digest = [0u8; DIGEST_BYTES];
    for (at, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * at..2 * at + 2], 16).expect("checked as hex above");
    }
    Ok(digest)
}

/// Why ACL SETUSER failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetUserError {
    Rule { rule: Bytes, error: RuleError },
    TooManyUsers,
}

/// Every user, and the epoch sessions compare to know when to reread their permissions.
pub struct Users {
    users: RwLock<BTreeMap<Bytes, User>>,
    epoch: AtomicU64,
    pub log: AclLog,
}

impl Users {
    pub fn new(requirepass: Option<&str>) -> Users {
        let users = BTreeMap::from([(Bytes::from_static(DEFAULT_USER.as_bytes()), User::default_with(requirepass))]);
        Users { users: RwLock::new(users), epoch: AtomicU64::new(0), log: AclLog::default() }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub fn get(&self, name: &[u8]) -> Option<User> {
        self.users.read().get(name).cloned()
    }

    pub fn names(&self) -> Vec<Bytes> {
        self.users.read().keys().cloned().collect()
    }

    /// ACL LIST's lines, by user name.
    pub fn describe_all(&self) -> Vec<String> {
        self.users.read().iter().map(|(name, user)| user.describe(name)).collect()
    }

    /// Creates or changes `name` by `rules`, all or none of them.
    pub fn set_user(&self, name: &Bytes, rules: &[Bytes]) -> Result<(), SetUserError> {
        let mut users = self.users.write();
        let mut user = match users.get(name) {
            Some(user) => user.clone(),
            None if users.len() >= USERS_MAX => return Err(SetUserError::TooManyUsers),
            None => User::new(),
        };
        for rule in rules {
            user.apply(rule).map_err(|error| SetUserError::Rule { rule: rule.clone(), error })?;
        }
        users.insert(name.clone(), user);
        drop(users);
        self.changed();
        Ok(())
    }

    /// Deletes the named users (never `default`, which the caller refuses); answers how many
    /// existed.
    pub fn delete(&self, names: &[Bytes]) -> usize {
        assert!(names.iter().all(|name| name.as_ref() != DEFAULT_USER.as_bytes()), "the default user is never deleted");
        let mut users = self.users.write();
        let deleted = names.iter().filter(|name| users.remove(name.as_ref()).is_some()).count();
        drop(users);
        self.changed();
        deleted
    }

    /// CONFIG SET requirepass: the default user's only password, or `nopass` when None.
    pub fn set_default_password(&self, password: Option<&str>) {
        self.users.write().get_mut(DEFAULT_USER.as_bytes()).expect("the default user exists").set_only_password(password);
        self.changed();
    }

    pub fn default_needs_no_password(&self) -> bool {
        self.users.read().get(DEFAULT_USER.as_bytes()).expect("the default user exists").needs_no_password()
    }
}

/// Where a denial happened, as ACL LOG names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogContext {
    TopLevel,
    Multi,
    Script,
}

impl LogContext {
    fn name(self) -> &'static str {
        match self {
            LogContext::TopLevel => "toplevel",
            LogContext::Multi => "multi",
            LogContext::Script => "lua",
        }
    }
}

/// One ACL LOG entry: denials alike within `ACL_LOG_GROUPING_MS` counted together.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub count: u64,
    pub reason: &'static str,
    pub context: &'static str,
    pub object: Bytes,
    pub username: Bytes,
    pub updated: Instant,
    pub client_info: String,
}

/// The client as CLIENT LIST shows it, without the line's end.
fn client_info(client: &ClientHandle) -> String {
    client.describe().trim_end().to_string()
}

/// ACL LOG: the latest denials and failed authentications, newest first, at most
/// `ACL_LOG_ENTRIES_MAX`.
#[derive(Default)]
pub struct AclLog {
    entries: Mutex<VecDeque<LogEntry>>,
}

impl AclLog {
    /// A denial to `client`, as its user (`ClientHandle::user`).
    pub fn record_denial(&self, denial: &Denial, context: LogContext, client: &ClientHandle) {
        let (reason, object) = denial.reason_and_object();
        let username = client.user.lock().clone();
        self.record(reason, context.name(), object, username, client_info(client));
    }

    /// `client`'s failed authentication as `username`.
    pub fn record_failed_auth(&self, username: &Bytes, client: &ClientHandle) {
        self.record("auth", LogContext::TopLevel.name(), Bytes::from_static(b"AUTH"), username.clone(), client_info(client));
    }

    fn record(&self, reason: &'static str, context: &'static str, object: Bytes, username: Bytes, client_info: String) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        let alike = |entry: &LogEntry| {
            entry.reason == reason && entry.context == context && entry.object == object && entry.username == username && now.duration_since(entry.updated).as_millis() < ACL_LOG_GROUPING_MS
        };
        let mut entry = match entries.iter().position(alike) {
            Some(at) => entries.remove(at).expect("found above"),
            None => LogEntry { count: 0, reason, context, object, username, updated: now, client_info: String::new() },
        };
        (entry.count, entry.updated, entry.client_info) = (entry.count + 1, now, client_info);
        entries.push_front(entry);
        entries.truncate(ACL_LOG_ENTRIES_MAX);
    }

    /// The newest `count` entries.
    pub fn newest(&self, count: usize) -> Vec<LogEntry> {
        self.entries.lock().iter().take(count).cloned().collect()
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_after(rules: &[&str]) -> Result<User, RuleError> {
        let mut user = User::new();
        for rule in rules {
            user.apply(rule.as_bytes())?;
        }
        Ok(user)
    }

    #[test]
    fn rules_describe_a_user_as_redis_lists_it() {
        assert_eq!(User::default_with(None).describe(b"default"), "user default on nopass ~* &* +@all");
        assert_eq!(user_after(&[]).unwrap().describe(b"alice"), "user alice off resetchannels -@all");
        let carol = user_after(&["on", ">p1", "allcommands", "ALLKEYS"]).unwrap();
        assert_eq!(carol.describe(b"carol"), format!("user carol on #{} ~* resetchannels +@all", carol.password_hashes()[0]));
        assert_eq!(user_after(&["on", "reset"]).unwrap().describe(b"r"), "user r off sanitize-payload resetchannels -@all");
    }

    #[test]
    fn passwords_and_nopass_clear_each_other() {
        let with_password = user_after(&["on", "nopass", ">x"]).unwrap();
        assert_eq!(with_password.flags(), ["on"]);
        assert!(with_password.accepts(b"x") && !with_password.accepts(b"y"));
        let nopass = user_after(&["on", ">x", "nopass"]).unwrap();
        assert!(nopass.password_hashes().is_empty() && nopass.accepts(b"anything"));
        assert!(!user_after(&[">x"]).unwrap().accepts(b"x"), "a user that is off accepts no password");
    }

    #[test]
    fn password_hashes_are_sha256_and_removable() {
        // SHA-256 of "password", as Redis shows it.
        let hash = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";
        let user = user_after(&["on", &format!("#{hash}")]).unwrap();
        assert!(user.accepts(b"password"));
        assert_eq!(user_after(&[">password"]).unwrap().password_hashes(), [hash]);
        assert!(user_after(&[">password", &format!("!{hash}")]).unwrap().password_hashes().is_empty());
        assert_eq!(user_after(&["<nope"]), Err(RuleError::PasswordNotFound));
        assert_eq!(user_after(&["#abc"]), Err(RuleError::HashFormat));
        assert_eq!(user_after(&[&format!("#{}", hash.to_uppercase())]), Err(RuleError::HashFormat));
    }

    #[test]
    fn finer_rules_are_refused_not_ignored() {
        for rule in ["+get", "-@dangerous", "~app:*", "%R~*", "&news", "(~x +get)", "-get"] {
            assert_eq!(user_after(&[rule]), Err(RuleError::Partial), "{rule}");
        }
        assert_eq!(user_after(&["~*", "~foo"]), Err(RuleError::PatternAfterAll));
        assert_eq!(user_after(&["bogus"]), Err(RuleError::Syntax));
    }

    #[test]
    fn set_user_applies_all_rules_or_none() {
        let users = Users::new(None);
        let name = Bytes::from_static(b"alice");
        users.set_user(&name, &[Bytes::from_static(b"on")]).unwrap();
        let epoch = users.epoch();
        let failed = users.set_user(&name, &[Bytes::from_static(b"allkeys"), Bytes::from_static(b"+get")]);
        assert!(matches!(failed, Err(SetUserError::Rule { error: RuleError::Partial, .. })));
        assert!(!users.get(&name).unwrap().permissions().all_keys, "the rule before the refused one was not applied");
        assert_eq!(users.epoch(), epoch, "a refused change changes nothing");
        assert_eq!(users.delete(&[name.clone(), Bytes::from_static(b"nobody")]), 1);
        assert!(users.epoch() > epoch);
        assert_eq!(users.names(), [Bytes::from_static(b"default")]);
    }

    #[test]
    fn the_default_user_follows_requirepass() {
        let users = Users::new(Some("secret"));
        assert!(!users.default_needs_no_password());
        assert!(users.get(b"default").unwrap().accepts(b"secret"));
        users.set_default_password(None);
        assert!(users.default_needs_no_password());
    }

    #[test]
    fn alike_denials_count_on_one_entry_and_the_log_is_bounded() {
        let log = AclLog::default();
        let clients = [ClientHandle::for_tests(1), ClientHandle::for_tests(2), ClientHandle::for_tests(3)];
        for client in &clients {
            *client.user.lock() = Bytes::from_static(b"eve");
        }
        let denial = Denial::Command("get".into());
        log.record_denial(&denial, LogContext::TopLevel, &clients[0]);
        log.record_denial(&denial, LogContext::TopLevel, &clients[1]);
        log.record_denial(&denial, LogContext::Multi, &clients[2]);
        let entries = log.newest(10);
        assert_eq!(entries.iter().map(|entry| (entry.count, entry.context)).collect::<Vec<_>>(), [(1, "multi"), (2, "toplevel")]);
        assert!(entries[1].client_info.starts_with("id=2 "), "the entry shows the latest client");
        assert!(entries[1].username == "eve" && !entries[1].client_info.ends_with('\n'));
        for at in 0..ACL_LOG_ENTRIES_MAX + 10 {
            log.record_denial(&Denial::Key(Bytes::from(at.to_string())), LogContext::TopLevel, &clients[0]);
        }
        assert_eq!(log.newest(usize::MAX).len(), ACL_LOG_ENTRIES_MAX);
    }
}
