//! Vectors as a Parquet file of one column, `embedding`, a list of floats (or of 8-bit integers for quantized
//! outputs) per row, in corpus order: what pandas, pyarrow, Polars, DuckDB and Ray Data read as a list column.
//!
//! A Parquet file is whole only once its footer is written, so the run writes `<output>.partial` and renames
//! it over `<output>` when it finishes (ending on an error or a signal included). Resuming copies the rows of
//! the finished file into the new one first: a killed process loses that run's rows, never an earlier run's.

use std::ffi::OsString;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use parquet::basic::{Compression, LogicalType, Type as PhysicalType};
use parquet::column::reader::ColumnReader;
use parquet::data_type::{FloatType, Int32Type};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnDescriptor;

use super::output::Element;

/// The column's name: what Ray Data's and sentence-transformers' jobs call it.
pub const COLUMN: &str = "embedding";

pub struct ParquetVectors {
    writer: SerializedFileWriter<BufWriter<File>>,
    path: PathBuf,
    partial: PathBuf,
    dim: usize,
    element: Element,
    rows: usize,
}

impl ParquetVectors {
    /// A new file at `path`, written beside it until [`finish`](Self::finish); with `resume`, it starts with
    /// the rows `path` holds (checked to be of this width and element).
    pub fn open(path: &Path, dim: usize, element: Element, resume: bool) -> anyhow::Result<ParquetVectors> {
        let kept = match resume && path.exists() {
            true => Some(VectorReader::open(path, dim, element)?),
            false => None,
        };
        let mut partial = OsString::from(path.as_os_str());
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
        let schema = parse_message_type(&schema(element))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_created_by(format!("aleph {}", env!("CARGO_PKG_VERSION")))
            .build();
        let writer = SerializedFileWriter::new(BufWriter::new(file), Arc::new(schema), Arc::new(props))?;
        let mut out = ParquetVectors { writer, path: path.to_path_buf(), partial, dim, element, rows: 0 };
        if let Some(mut kept) = kept {
            loop {
                let rows = kept.next_chunk(4096)?;
                if rows.is_empty() {
                    break;
                }
                out.append(&rows)?;
            }
        }
        Ok(out)
    }

    /// Rows written (those kept from an earlier run included).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends vectors (each `dim` long, values already of the element's range) as one row group.
    pub fn append(&mut self, vectors: &[Vec<f32>]) -> anyhow::Result<()> {
        if vectors.is_empty() {
            return Ok(());
        }
        let mut values_f32 = Vec::new();
        let mut values_i32 = Vec::new();
        for v in vectors {
            if v.len() != self.dim {
                bail!("a vector of {} values in a {}-dimensional file", v.len(), self.dim);
            }
            match self.element {
                Element::F32 => values_f32.extend_from_slice(v),
                Element::I8 => values_i32.extend(v.iter().map(|&x| x as i8 as i32)),
                Element::U8 => values_i32.extend(v.iter().map(|&x| x as u8 as i32)),
            }
        }
        // Every element is present (definition level 1); a row starts where the repetition level is 0.
        let definition = vec![1i16; vectors.len() * self.dim];
        let repetition: Vec<i16> = (0..vectors.len() * self.dim).map(|i| i16::from(i % self.dim != 0)).collect();
        let mut group = self.writer.next_row_group()?;
        let mut column = group.next_column()?.ok_or_else(|| anyhow!("the vectors' schema has no column"))?;
        match self.element {
            Element::F32 => {
                column.typed::<FloatType>().write_batch(&values_f32, Some(&definition), Some(&repetition))?;
            }
            Element::I8 | Element::U8 => {
                column.typed::<Int32Type>().write_batch(&values_i32, Some(&definition), Some(&repetition))?;
            }
        }
        column.close()?;
        group.close()?;
        self.rows += vectors.len();
        Ok(())
    }

    /// Writes the footer and puts the file in place of `path`.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.writer.finish()?;
        drop(self.writer);
        std::fs::rename(&self.partial, &self.path)
            .with_context(|| format!("moving {} to {}", self.partial.display(), self.path.display()))
    }
}

/// The file's schema: a list column in Parquet's three-level form, as pyarrow writes `list<float>`.
fn schema(element: Element) -> String {
    let leaf = match element {
        Element::F32 => "required float element;",
        Element::I8 => "required int32 element (INTEGER(8,true));",
        Element::U8 => "required int32 element (INTEGER(8,false));",
    };
    format!("message aleph_vectors {{ required group {COLUMN} (LIST) {{ repeated group list {{ {leaf} }} }} }}")
}

/// The rows of a vectors file this writer made, a chunk at a time.
pub struct VectorReader {
    reader: SerializedFileReader<File>,
    dim: usize,
    next_group: usize,
    current: Option<ColumnReader>,
    name: String,
}

impl VectorReader {
    /// Opens `path`, checking it holds `dim`-wide vectors of `element`.
    pub fn open(path: &Path, dim: usize, element: Element) -> anyhow::Result<VectorReader> {
        let name = path.display().to_string();
        let file = File::open(path).with_context(|| format!("opening {name}"))?;
        let reader = SerializedFileReader::new(file).map_err(|e| {
            anyhow!("{name} is not a whole Parquet file ({e}): remove it or pass --no-resume to start over")
        })?;
        let schema = reader.metadata().file_metadata().schema_descr();
        let column = (schema.num_columns() == 1).then(|| schema.column(0));
        let old = column.as_deref().and_then(element_of);
        if old != Some(element) {
            bail!(
                "{name} does not hold this model's vectors (a `{COLUMN}` list of {}): remove it or pass --no-resume",
                element.describe()
            );
        }
        let out = VectorReader { reader, dim, next_group: 0, current: None, name };
        if let Some(first) = out.peek_width()? {
            if first != dim {
                bail!(
                    "{} holds {first}-dimensional vectors, this model writes {dim}-dimensional ones: remove it or \
                     pass --no-resume",
                    out.name
                );
            }
        }
        Ok(out)
    }

    /// The width of the first row, read with a reader of its own (the file may be empty).
    fn peek_width(&self) -> anyhow::Result<Option<usize>> {
        if self.reader.num_row_groups() == 0 {
            return Ok(None);
        }
        let group = self.reader.get_row_group(0)?;
        let (mut definition, mut repetition) = (Vec::new(), Vec::new());
        let levels = match group.get_column_reader(0)? {
            ColumnReader::FloatColumnReader(mut r) => {
                r.read_records(1, Some(&mut definition), Some(&mut repetition), &mut Vec::new())?.2
            }
            ColumnReader::Int32ColumnReader(mut r) => {
                r.read_records(1, Some(&mut definition), Some(&mut repetition), &mut Vec::new())?.2
            }
            _ => bail!("{}: not a vectors file", self.name),
        };
        Ok((levels > 0).then_some(levels))
    }

    /// Up to `n` more rows; empty at the end.
    pub fn next_chunk(&mut self, n: usize) -> anyhow::Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(n);
        let (mut definition, mut repetition) = (Vec::new(), Vec::new());
        while out.len() < n {
            if self.current.is_none() {
                if self.next_group >= self.reader.num_row_groups() {
                    break;
                }
                self.current = Some(self.reader.get_row_group(self.next_group)?.get_column_reader(0)?);
                self.next_group += 1;
            }
            definition.clear();
            repetition.clear();
            let want = n - out.len();
            let values: Vec<f32> = match self.current.as_mut() {
                Some(ColumnReader::FloatColumnReader(r)) => {
                    let mut v = Vec::new();
                    r.read_records(want, Some(&mut definition), Some(&mut repetition), &mut v)?;
                    v
                }
                Some(ColumnReader::Int32ColumnReader(r)) => {
                    let mut v = Vec::new();
                    r.read_records(want, Some(&mut definition), Some(&mut repetition), &mut v)?;
                    v.into_iter().map(|x| x as f32).collect()
                }
                _ => bail!("{}: not a vectors file", self.name),
            };
            if repetition.is_empty() {
                self.current = None;
                continue;
            }
            if definition.iter().any(|&d| d != 1) || values.len() != repetition.len() {
                bail!("{}: a row with missing values", self.name);
            }
            let mut start = 0;
            for end in (1..=repetition.len()).filter(|&i| i == repetition.len() || repetition[i] == 0) {
                if end - start != self.dim {
                    bail!("{}: a row of {} values in a {}-dimensional file", self.name, end - start, self.dim);
                }
                out.push(values[start..end].to_vec());
                start = end;
            }
        }
        Ok(out)
    }
}

/// The element type of a column this writer made (a three-level list of one leaf); `None` for anything else.
fn element_of(column: &ColumnDescriptor) -> Option<Element> {
    if column.path().parts() != [COLUMN, "list", "element"] || column.max_rep_level() != 1 {
        return None;
    }
    match (column.physical_type(), column.logical_type_ref()) {
        (PhysicalType::FLOAT, None) => Some(Element::F32),
        (PhysicalType::INT32, Some(LogicalType::Integer(int))) if int.bit_width == 8 => {
            Some(if int.is_signed { Element::I8 } else { Element::U8 })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("aleph-pq-{}-{name}.parquet", std::process::id()))
    }

    #[test]
    fn rows_come_back_in_order_and_a_resumed_file_keeps_them() {
        let path = temp("resume");
        let mut w = ParquetVectors::open(&path, 3, Element::F32, false).unwrap();
        w.append(&[vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]).unwrap();
        w.append(&[vec![7.0, 8.0, 9.0]]).unwrap();
        w.finish().unwrap();
        let mut w = ParquetVectors::open(&path, 3, Element::F32, true).unwrap();
        assert_eq!(w.rows(), 3);
        w.append(&[vec![-1.0, -2.0, -3.5]]).unwrap();
        w.finish().unwrap();
        let mut r = VectorReader::open(&path, 3, Element::F32).unwrap();
        let rows = r.next_chunk(2).unwrap();
        assert_eq!(rows, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
        let rows = r.next_chunk(10).unwrap();
        assert_eq!(rows, vec![vec![7.0, 8.0, 9.0], vec![-1.0, -2.0, -3.5]]);
        assert!(r.next_chunk(10).unwrap().is_empty());
        let err = ParquetVectors::open(&path, 4, Element::F32, true).err().unwrap().to_string();
        assert!(err.contains("3-dimensional"), "{err}");
        let err = ParquetVectors::open(&path, 3, Element::I8, true).err().unwrap().to_string();
        assert!(err.contains("8-bit"), "{err}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn quantized_vectors_keep_their_sign() {
        let path = temp("int8");
        for element in [Element::I8, Element::U8] {
            let row = match element {
                Element::I8 => vec![-128.0, 0.0, 127.0],
                _ => vec![0.0, 200.0, 255.0],
            };
            let mut w = ParquetVectors::open(&path, 3, element, false).unwrap();
            w.append(std::slice::from_ref(&row)).unwrap();
            w.finish().unwrap();
            let mut r = VectorReader::open(&path, 3, element).unwrap();
            assert_eq!(r.next_chunk(5).unwrap(), vec![row]);
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_without_its_footer_is_refused_naming_what_to_do() {
        let path = temp("torn");
        std::fs::write(&path, b"PAR1 and then nothing").unwrap();
        let err = ParquetVectors::open(&path, 3, Element::F32, true).err().unwrap().to_string();
        assert!(err.contains("not a whole Parquet file") && err.contains("--no-resume"), "{err}");
        let _ = std::fs::remove_file(&path);
    }
}
