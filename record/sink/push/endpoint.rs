//! The `--push` URL and its credentials: parsing, redaction (a password never reaches the recording's header, the
//! screen or a message), and the one way credentials may be given.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Result};

/// Credentials of the push: what the `Authorization` header says. Its `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `user:password`, for Basic authentication.
    Basic(String),
    /// A token, for Bearer authentication.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Basic(_) => f.write_str("Basic(***)"),
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

impl Auth {
    /// The `Authorization` header's value.
    pub(super) fn header(&self) -> String {
        match self {
            Auth::Basic(userinfo) => format!("Basic {}", base64(userinfo.as_bytes())),
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
}

/// An `http://` URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address, as given (an IPv6 address without brackets).
    pub host: String,
    /// Port (80 when not given).
    pub port: u16,
    /// Path before `/ingest`, without a trailing `/` (empty for the root).
    pub prefix: String,
    /// The URL's user (`http://user@host` or `http://user:password@host`).
    pub user: Option<String>,
    /// The credentials: the URL's `user:password`, or what [`Endpoint::with_credentials`] found.
    pub auth: Option<Auth>,
}

/// `url` with the password of its `user:password@` shown as `***` (`http://user:***@host`), for everything that
/// stores or prints a URL given to `--push`.
pub fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else { return url.to_string() };
    let rest = &url[scheme_end..];
    // The authority ends where Endpoint::parse ends it, at the first '/': a password with a '?' or '#' in it
    // (`http://u:p#x@h`, which parse accepts and sends) is redacted too.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..scheme_end], &rest[..colon], &rest[at..]),
        None => url.to_string(),
    }
}

/// The command line as the recording's header keeps it: the password of a `--push` URL shown as `***`.
pub fn redacted_command_line(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut push_value = false;
    for a in args {
        if push_value {
            out.push(redacted(a));
            push_value = false;
        } else if let Some(v) = a.strip_prefix("--push=") {
            out.push(format!("--push={}", redacted(v)));
        } else {
            push_value = a == "--push";
            out.push(a.clone());
        }
    }
    out
}

/// Environment variable with the password of the URL's user (Basic authentication).
pub const PASSWORD_ENV: &str = "PYPERF_PUSH_PASSWORD";
/// Environment variable with a token (Bearer authentication).
pub const TOKEN_ENV: &str = "PYPERF_PUSH_TOKEN";
/// Longest credentials file read.
const MAX_AUTH_FILE: u64 = 64 * 1024;

/// A password (base64'd into the header: anything but control characters) or, with `token`, a token (written into
/// the header as it is: visible ASCII only, a line break would end the header).
fn check_secret(what: &str, secret: &str, token: bool) -> Result<()> {
    if secret.is_empty() {
        bail!("{what} is empty");
    }
    let ok = if token { secret.bytes().all(|b| b.is_ascii_graphic()) } else { !secret.chars().any(char::is_control) };
    if !ok {
        bail!("{what} has characters a {} cannot hold", if token { "token" } else { "password" });
    }
    Ok(())
}

impl Endpoint {
    /// Parses `http://[user[:password]@]host[:port][/path]`; the error says what is wrong, in one line (the
    /// password shown as `***`).
    pub fn parse(url: &str) -> Result<Endpoint> {
        let shown = redacted(url);
        let bad = |why: &str| anyhow::anyhow!("--push {shown:?}: {why}");
        if url.starts_with("https://") {
            return Err(bad(
                "https is not supported; push to a plain http endpoint (a local Grafana Alloy or Pyroscope agent, \
                 or a server reachable over http, e.g. http://localhost:4040)",
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| bad("give an http:// URL, e.g. http://localhost:4040"))?;
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the URL has spaces or control characters"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) {
            return Err(bad("give the server's base URL, without a query (pyperf adds /ingest?...)"));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in the host"))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(bad("unexpected text after the IPv6 address")),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| bad("the port must be 1-65535"))?,
            None => 80,
        };
        let (user, auth) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((name, _)) => (Some(name.to_string()), Some(Auth::Basic(u.to_string()))),
                None => (Some(u.to_string()), None),
            },
        };
        Ok(Endpoint { host: host.to_string(), port, prefix: path.trim_end_matches('/').to_string(), user, auth })
    }

    /// Takes the credentials from `--push-auth-file` or the environment (`env` reads a variable): at most one
    /// way of giving them, the URL's password included. The file's first line is `Bearer TOKEN`, `USER:PASSWORD`,
    /// or, with the URL's `user@`, the password alone.
    pub fn with_credentials(
        mut self,
        auth_file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Endpoint> {
        let password = env(PASSWORD_ENV).filter(|v| !v.is_empty());
        let token = env(TOKEN_ENV).filter(|v| !v.is_empty());
        let mut ways = Vec::new();
        if self.auth.is_some() {
            ways.push("a password in the URL");
        }
        if password.is_some() {
            ways.push(PASSWORD_ENV);
        }
        if token.is_some() {
            ways.push(TOKEN_ENV);
        }
        if auth_file.is_some() {
            ways.push("--push-auth-file");
        }
        if ways.len() > 1 {
            bail!("--push: credentials given {} ways ({}); give them one way", ways.len(), ways.join(", "));
        }
        if let Some(p) = password {
            let Some(user) = &self.user else {
                bail!("{PASSWORD_ENV} is set: give the user in the URL, e.g. --push http://USER@host:4040");
            };
            check_secret(PASSWORD_ENV, &p, false)?;
            self.auth = Some(Auth::Basic(format!("{user}:{p}")));
        } else if let Some(t) = token {
            check_secret(TOKEN_ENV, &t, true)?;
            self.auth = Some(Auth::Bearer(t));
        } else if let Some(path) = auth_file {
            let what = format!("--push-auth-file {}", path.display());
            let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{what}: cannot open it: {e}"))?;
            let mut text = String::new();
            file.take(MAX_AUTH_FILE)
                .read_to_string(&mut text)
                .map_err(|e| anyhow::anyhow!("{what}: cannot read it as text: {e}"))?;
            let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
            check_secret(&what, line, false)?;
            self.auth = Some(if let Some(t) = line.strip_prefix("Bearer ") {
                check_secret(&what, t.trim(), true)?;
                Auth::Bearer(t.trim().to_string())
            } else if let Some(user) = &self.user {
                if line.contains(':') {
                    bail!("{what}: the URL names the user already; put only the password in the file");
                }
                Auth::Basic(format!("{user}:{line}"))
            } else if line.contains(':') {
                Auth::Basic(line.to_string())
            } else {
                bail!("{what}: give `USER:PASSWORD` or `Bearer TOKEN` on its first line (or the user in the URL)");
            });
        }
        Ok(self)
    }

    /// `http://host:port` for messages (never the password).
    pub fn shown(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}{}", self.host, self.port, self.prefix)
        } else {
            format!("http://{}:{}{}", self.host, self.port, self.prefix)
        }
    }
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_examples() {
        for (i, o) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")]
        {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://localhost:4040").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str(), e.auth), ("localhost", 4040, "", None));
        let e = Endpoint::parse("http://u:p@10.0.0.1/pyroscope/").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.prefix.as_str()), ("10.0.0.1", 80, "/pyroscope"));
        assert_eq!((e.user.as_deref(), &e.auth), (Some("u"), &Some(Auth::Basic("u:p".into()))));
        assert!(!format!("{e:?}").contains("u:p"), "{e:?}");
        assert_eq!(e.shown(), "http://10.0.0.1:80/pyroscope");
        let e = Endpoint::parse("http://[::1]:4040").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4040));
        for bad in ["https://x", "ftp://x", "http://", "http://h:0", "http://h:99999", "http://h/ingest?x=1", "x"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        assert!(Endpoint::parse("https://x").unwrap_err().to_string().contains("https is not supported"));
    }

    #[test]
    fn passwords_are_redacted_and_credentials_come_one_way() {
        assert_eq!(redacted("http://u:secret@h:4040/x"), "http://u:***@h:4040/x");
        assert_eq!(redacted("http://u@h"), "http://u@h");
        assert_eq!(redacted("http://h/a@b"), "http://h/a@b");
        assert_eq!(redacted("http://u:p#x@h"), "http://u:***@h");
        assert_eq!(redacted("http://u:p?x@h/y"), "http://u:***@h/y");
        let err = Endpoint::parse("http://u:p#x@h:0").unwrap_err().to_string();
        assert!(!err.contains("p#x"), "{err}");
        let argv: Vec<String> =
            ["pyperf", "record", "--push", "http://u:pw@h", "--push=http://v:pw2@h", "--", "x", "http://w:keep@h"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let shown = redacted_command_line(&argv);
        assert_eq!(shown[3], "http://u:***@h");
        assert_eq!(shown[4], "--push=http://v:***@h");
        assert!(!shown.join(" ").contains("pw"), "{shown:?}");
        let err = Endpoint::parse("http://u:secret@h:0").unwrap_err().to_string();
        assert!(!err.contains("secret") && err.contains("u:***@"), "{err}");

        let none = |_: &str| None;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let url = Endpoint::parse("http://ops@h").unwrap();
        let e = url.clone().with_credentials(None, env(&[(PASSWORD_ENV, "pw")])).unwrap();
        assert_eq!(e.auth, Some(Auth::Basic("ops:pw".into())));
        let e = Endpoint::parse("http://h").unwrap().with_credentials(None, env(&[(TOKEN_ENV, "t0k")])).unwrap();
        assert_eq!(e.auth.unwrap().header(), "Bearer t0k");
        let bare = Endpoint::parse("http://h").unwrap();
        assert!(bare.clone().with_credentials(None, env(&[(PASSWORD_ENV, "pw")])).is_err());
        assert!(bare.clone().with_credentials(None, env(&[(TOKEN_ENV, "a\r\nX: y")])).is_err());
        let both = Endpoint::parse("http://u:p@h").unwrap().with_credentials(None, env(&[(TOKEN_ENV, "t")]));
        assert!(both.unwrap_err().to_string().contains("give them one way"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth");
        for (text, base, want) in [
            ("Bearer abc\n", "http://h", Auth::Bearer("abc".into())),
            ("u:p w\n", "http://h", Auth::Basic("u:p w".into())),
            ("pw\r\n", "http://ops@h", Auth::Basic("ops:pw".into())),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Endpoint::parse(base).unwrap().with_credentials(Some(&file), none).unwrap();
            assert_eq!(e.auth, Some(want), "{text:?}");
        }
        std::fs::write(&file, "justapassword").unwrap();
        assert!(bare.with_credentials(Some(&file), none).is_err());
    }
}
