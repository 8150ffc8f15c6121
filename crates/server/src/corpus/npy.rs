//! A NumPy `.npy` file of `[rows, dim]` vectors written a chunk at a time: the header keeps room for any row
//! count and is rewritten after each chunk, so the file is valid after every chunk and a later run resumes
//! after its last whole row.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context};

use super::output::Element;

/// The header's size: magic, version, length and the dict padded with spaces (a multiple of 64, as NumPy
/// writes it), wide enough for any shape.
const HEADER_LEN: usize = 128;
const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";

/// NumPy's `descr` and the byte width of an element.
impl Element {
    fn descr(self) -> &'static str {
        match self {
            Element::F32 => "<f4",
            Element::I8 => "|i1",
            Element::U8 => "|u1",
        }
    }

    fn size(self) -> usize {
        match self {
            Element::F32 => 4,
            _ => 1,
        }
    }
}

pub struct NpyWriter {
    file: File,
    dim: usize,
    rows: usize,
    element: Element,
}

impl NpyWriter {
    /// A new file (replacing any), or, with `resume`, the rows an earlier run wrote to `path` kept (a torn last
    /// row dropped). `dim` is checked against what the file holds.
    pub fn open(path: &Path, dim: usize, element: Element, resume: bool) -> anyhow::Result<NpyWriter> {
        let ctx = || format!("opening {}", path.display());
        if resume && path.exists() {
            let mut file = OpenOptions::new().read(true).write(true).open(path).with_context(ctx)?;
            let (old_dim, old_element) = read_header(&mut file).with_context(ctx)?;
            if old_dim != dim || old_element != element {
                bail!(
                    "{} holds {}-dimensional {} vectors, this model writes {dim}-dimensional {}: remove it or \
                     pass --no-resume",
                    path.display(),
                    old_dim,
                    old_element.descr(),
                    element.descr()
                );
            }
            let data = file.metadata()?.len() as usize - HEADER_LEN;
            let rows = data / (dim * element.size()).max(1);
            file.set_len((HEADER_LEN + rows * dim * element.size()) as u64)?;
            let mut w = NpyWriter { file, dim, rows, element };
            w.write_header()?;
            return Ok(w);
        }
        let file = File::create(path).with_context(ctx)?;
        let mut w = NpyWriter { file, dim, rows: 0, element };
        w.write_header()?;
        Ok(w)
    }

    /// Rows already in the file.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends vectors (each `dim` long, values already of the element's range) and makes them durable in
    /// the header's count.
    pub fn append(&mut self, vectors: &[Vec<f32>]) -> anyhow::Result<()> {
        let mut bytes = Vec::with_capacity(vectors.len() * self.dim * self.element.size());
        for v in vectors {
            if v.len() != self.dim {
                bail!("a vector of {} values in a {}-dimensional file", v.len(), self.dim);
            }
            match self.element {
                Element::F32 => bytes.extend(v.iter().flat_map(|x| x.to_le_bytes())),
                Element::I8 => bytes.extend(v.iter().map(|&x| x as i8 as u8)),
                Element::U8 => bytes.extend(v.iter().map(|&x| x as u8)),
            }
        }
        self.file.seek(SeekFrom::End(0))?;
        self.file.write_all(&bytes)?;
        self.rows += vectors.len();
        self.write_header()
    }

    fn write_header(&mut self) -> anyhow::Result<()> {
        let dict = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}",
            self.element.descr(),
            self.rows,
            self.dim
        );
        let mut header = MAGIC.to_vec();
        let pad = HEADER_LEN - MAGIC.len() - 2 - dict.len() - 1;
        header.extend(((HEADER_LEN - MAGIC.len() - 2) as u16).to_le_bytes());
        header.extend(dict.as_bytes());
        header.extend(std::iter::repeat_n(b' ', pad));
        header.push(b'\n');
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&header)?;
        self.file.flush()?;
        Ok(())
    }
}

/// (dim, element) of a file this writer made.
fn read_header(file: &mut File) -> anyhow::Result<(usize, Element)> {
    let mut header = vec![0u8; HEADER_LEN];
    file.read_exact(&mut header).map_err(|_| anyhow!("not an .npy file Aleph wrote (too short)"))?;
    if !header.starts_with(MAGIC) {
        bail!("not an .npy file (version 1.0)");
    }
    let dict = String::from_utf8_lossy(&header[MAGIC.len() + 2..]);
    let element = [Element::F32, Element::I8, Element::U8]
        .into_iter()
        .find(|e| dict.contains(&format!("'descr': '{}'", e.descr())))
        .ok_or_else(|| anyhow!("an .npy file of another element type"))?;
    let shape = dict.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).unwrap_or("");
    let dim = shape
        .split(',')
        .nth(1)
        .and_then(|d| d.trim().parse().ok())
        .ok_or_else(|| anyhow!("an .npy file without a [rows, dim] shape"))?;
    Ok((dim, element))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_file_keeps_whole_rows_and_its_header_counts_them() {
        let path = std::env::temp_dir().join(format!("aleph-npy-{}.npy", std::process::id()));
        let mut w = NpyWriter::open(&path, 3, Element::F32, false).unwrap();
        w.append(&[vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]).unwrap();
        drop(w);
        // A torn row at the end, as a crash mid-write leaves it.
        OpenOptions::new().append(true).open(&path).unwrap().write_all(&[0u8; 5]).unwrap();
        let mut w = NpyWriter::open(&path, 3, Element::F32, true).unwrap();
        assert_eq!(w.rows(), 2);
        w.append(&[vec![7.0, 8.0, 9.0]]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + 9 * 4);
        assert!(String::from_utf8_lossy(&bytes[..HEADER_LEN]).contains("'shape': (3, 3)"));
        assert_eq!(f32::from_le_bytes(bytes[HEADER_LEN + 8 * 4..].try_into().unwrap()), 9.0);
        assert!(NpyWriter::open(&path, 4, Element::F32, true).is_err(), "another width is refused");
        let _ = std::fs::remove_file(&path);
    }
}
