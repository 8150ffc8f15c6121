//! RFC 2397 `data:` URIs: `data:[<mime>][;param=value]*[;base64],<data>`.

use base64::Engine as _;

use super::MediaError;

/// A decoded data URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataUri {
    /// The declared media type, lower-cased (`image/png`); `None` when the URI names none.
    pub mime: Option<String>,
    pub bytes: Vec<u8>,
}

/// Parses a data URI, refusing one whose decoded bytes would pass `max_bytes`.
pub fn parse(uri: &str, max_bytes: usize) -> Result<DataUri, MediaError> {
    let rest = uri
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("data:"))
        .map(|_| &uri[5..])
        .ok_or_else(|| MediaError::Decode("not a data URI (expected `data:`)".into()))?;
    let (header, data) =
        rest.split_once(',').ok_or_else(|| MediaError::Decode("malformed data URI: no `,` before the data".into()))?;
    let mut params = header.split(';');
    let mime = params.next().map(str::trim).filter(|m| !m.is_empty()).map(str::to_ascii_lowercase);
    if let Some(m) = &mime {
        let valid = m.split_once('/').is_some_and(|(t, s)| !t.is_empty() && !s.is_empty() && !s.contains('/'));
        if !valid {
            return Err(MediaError::Decode(format!("malformed data URI: `{m}` is not a media type")));
        }
    }
    let is_base64 = params.any(|p| p.trim().eq_ignore_ascii_case("base64"));
    let bytes = if is_base64 {
        // Each 4 base64 characters carry 3 bytes: refuse before allocating.
        if data.len() / 4 * 3 > max_bytes.saturating_add(3) {
            return Err(too_large(data.len() / 4 * 3, max_bytes));
        }
        let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|e| MediaError::Decode(format!("invalid base64 in data URI: {e}")))?
    } else {
        percent_decode(data)?
    };
    if bytes.len() > max_bytes {
        return Err(too_large(bytes.len(), max_bytes));
    }
    Ok(DataUri { mime, bytes })
}

fn too_large(n: usize, max: usize) -> MediaError {
    MediaError::TooLarge(format!("the data URI holds {n} bytes; the limit is {max}"))
}

fn percent_decode(s: &str) -> Result<Vec<u8>, MediaError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let v = hex
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| MediaError::Decode("malformed percent-escape in data URI".into()))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base64_and_percent_encoded_data() {
        let d = parse("data:image/PNG;base64,aGVsbG8=", 100).unwrap();
        assert_eq!(d.mime.as_deref(), Some("image/png"));
        assert_eq!(d.bytes, b"hello");
        let d = parse("data:;name=x.wav;base64,aGVs bG8=", 100).unwrap();
        assert_eq!((d.mime, d.bytes), (None, b"hello".to_vec()));
        assert_eq!(parse("data:,a%20b", 100).unwrap().bytes, b"a b");
    }

    #[test]
    fn refuses_malformed_or_oversized_uris() {
        for bad in
            ["http://x", "data:image/png;base64", "data:image/png;base64,!!!", "data:png;base64,AA==", "data:,%zz"]
        {
            assert!(parse(bad, 100).is_err(), "{bad}");
        }
        assert!(matches!(parse("data:;base64,aGVsbG8=", 4), Err(MediaError::TooLarge(_))));
        assert!(matches!(parse(&format!("data:;base64,{}", "A".repeat(4000)), 100), Err(MediaError::TooLarge(_))));
    }
}
