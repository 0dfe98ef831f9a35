//! A minimal blocking HTTP/1.1 client for the harness's own requests (etcd's JSON gateway,
//! the API server's `/readyz` and namespace creation), so that starting a control plane needs
//! no async runtime and works from a `LazyLock` or a plain `#[test]`.

use std::io::{BufRead, BufReader, Read, Write};

/// The most of a response the harness reads; its answers are a few hundred bytes.
const MAX_BODY: usize = 1 << 20;

/// A response's status code and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// The body as text, for messages.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).trim().to_owned()
    }
}

/// Sends one request with `Connection: close` over `stream` and reads the response (by
/// `Content-Length`, chunked, or until end of stream). The stream's timeouts bound the wait.
pub(crate) fn request(
    stream: impl Read + Write,
    method: &str,
    host: &str,
    path: &str,
    bearer: Option<&str>,
    json_body: Option<&[u8]>,
) -> Result<Response, String> {
    let mut stream = BufReader::new(stream);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kubeplug-envtest\r\n\
         Accept: application/json\r\nConnection: close\r\n"
    );
    if let Some(token) = bearer {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = json_body.unwrap_or_default();
    if json_body.is_some() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    let writer = stream.get_mut();
    writer
        .write_all(head.as_bytes())
        .and_then(|()| writer.write_all(body))
        .and_then(|()| writer.flush())
        .map_err(|e| format!("sending the request: {e}"))?;

    let status_line = read_line(&mut stream)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut content_length = None;
    let mut chunked = false;
    loop {
        let line = read_line(&mut stream)?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("not a header line: {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let body = if chunked {
        read_chunked(&mut stream)?
    } else if let Some(len) = content_length {
        if len > MAX_BODY {
            return Err(format!("a body of {len} bytes is more than expected"));
        }
        let mut body = vec![0; len];
        stream
            .read_exact(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
        body
    } else {
        let mut body = Vec::new();
        stream
            .take(MAX_BODY as u64)
            .read_to_end(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
        body
    };
    Ok(Response { status, body })
}

/// One CRLF-terminated line without its terminator.
fn read_line(stream: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    let read = stream
        .take(8192)
        .read_line(&mut line)
        .map_err(|e| format!("reading the response: {e}"))?;
    if read == 0 || !line.ends_with('\n') {
        return Err(format!("the connection ended in a line: {line:?}"));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

fn read_chunked(stream: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let size_line = read_line(stream)?;
        let size = size_line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size, 16).map_err(|_| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            // Trailers, then the empty line; with Connection: close nothing follows.
            while !read_line(stream)?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err("the chunked body is more than expected".to_owned());
        }
        let start = body.len();
        body.resize(start + size, 0);
        stream
            .read_exact(&mut body[start..])
            .map_err(|e| format!("reading a chunk: {e}"))?;
        if !read_line(stream)?.is_empty() {
            return Err("a chunk did not end with CRLF".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A stream that records what is written and answers with canned bytes.
    struct Canned {
        answer: Cursor<Vec<u8>>,
        sent: Vec<u8>,
    }

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.answer.read(buf)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.sent.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn answer(bytes: &str) -> Result<Response, String> {
        let stream = Canned {
            answer: Cursor::new(bytes.as_bytes().to_vec()),
            sent: Vec::new(),
        };
        request(stream, "GET", "127.0.0.1", "/readyz", None, None)
    }

    #[test]
    fn bodies_by_length_chunks_or_end_of_stream_read_the_same() {
        let by_length = answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA").unwrap();
        let chunked = answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\no\r\n1;x=y\r\nk\r\n0\r\n\r\n",
        )
        .unwrap();
        let until_end = answer("HTTP/1.1 200 OK\r\n\r\nok").unwrap();
        for response in [by_length, chunked, until_end] {
            assert_eq!((response.status, response.text().as_str()), (200, "ok"));
        }
    }

    #[test]
    fn a_cut_answer_is_an_error() {
        assert!(answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok").is_err());
        assert!(answer("HTTP/1.1 200 OK\r\nContent-Le").is_err());
        assert!(answer("").is_err());
    }

    #[test]
    fn the_request_carries_the_token_and_the_body() {
        let mut stream = Canned {
            answer: Cursor::new(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".to_vec()),
            sent: Vec::new(),
        };
        let response = request(
            &mut stream,
            "POST",
            "127.0.0.1:6443",
            "/api/v1/namespaces",
            Some("secret"),
            Some(b"{}"),
        )
        .unwrap();
        assert_eq!(response.status, 201);
        let sent = String::from_utf8(stream.sent).unwrap();
        assert!(
            sent.starts_with("POST /api/v1/namespaces HTTP/1.1\r\n"),
            "{sent}"
        );
        assert!(
            sent.contains("\r\nAuthorization: Bearer secret\r\n"),
            "{sent}"
        );
        assert!(sent.ends_with("Content-Length: 2\r\n\r\n{}"), "{sent}");
    }
}
