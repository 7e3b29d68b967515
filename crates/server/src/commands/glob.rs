//! Redis glob patterns (KEYS, SCAN MATCH).

#![expect(
    clippy::indexing_slicing,
    reason = "pattern and string positions are compared with their lengths before each access"
)]

/// Redis glob matching: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star_p, mut star_s) = (None, 0);
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star_p = Some(pi);
                    star_s = si;
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class(p, pi, s[si]) {
                        if ok {
                            pi = next;
                            si += 1;
                            continue;
                        }
                    }
                }
                b'\\' if pi + 1 < p.len() && p[pi + 1] == s[si] => {
                    pi += 2;
                    si += 1;
                    continue;
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star_p {
            Some(sp) => {
                pi = sp + 1;
                star_s += 1;
                si = star_s;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn class(p: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let neg = p.get(i) == Some(&b'^');
    if neg {
        i += 1;
    }
    let mut hit = false;
    while i < p.len() && p[i] != b']' {
        if p[i] == b'\\' && i + 1 < p.len() {
            hit |= p[i + 1] == c;
            i += 2;
        } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            let (lo, hi) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= p[i] == c;
            i += 1;
        }
    }
    (i < p.len()).then_some((hit != neg, i + 1))
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn glob_matches_like_redis() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"h?llo", b"hello"));
        assert!(glob(b"h*llo", b"heeeello"));
        assert!(glob(b"h[ae]llo", b"hallo"));
        assert!(!glob(b"h[ae]llo", b"hillo"));
        assert!(glob(b"h[^e]llo", b"hallo"));
        assert!(!glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-b]llo", b"hbllo"));
        assert!(glob(b"user:*:name", b"user:42:name"));
        assert!(!glob(b"user:*:name", b"user:42:age"));
        assert!(glob(b"a\\*b", b"a*b"));
        assert!(!glob(b"a\\*b", b"axb"));
    }
}
