//! A walk over a document that keeps only what identifies an object (`apiVersion`, `kind`,
//! `metadata.name`, `metadata.namespace` and a `List`'s `items`), so that validation holds
//! little more than those fields in memory. It refuses exactly what `serde_json::Value`
//! refuses (non-string keys), so that the full parse later accepts what validation accepted.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::rules::{Document, Field, Fields, ItemsShape, Metadata};

#[derive(Debug, Default)]
enum StrField {
    #[default]
    Missing,
    Null,
    Str(String),
    Other,
}

#[derive(Debug, Default)]
struct MetaSummary {
    is_map: bool,
    null: bool,
    name: StrField,
    namespace: StrField,
}

#[derive(Debug, Default)]
pub(crate) struct DocSummary {
    is_map: bool,
    api_version: StrField,
    kind: StrField,
    metadata: Option<MetaSummary>,
    /// `items`, when it is a sequence.
    items: Option<Vec<DocSummary>>,
    items_other: bool,
}

impl StrField {
    fn view(&self) -> Field<'_> {
        match self {
            StrField::Missing => Field::Missing,
            StrField::Null => Field::Null,
            StrField::Str(s) => Field::Str(s),
            StrField::Other => Field::Other,
        }
    }
}

impl Document for DocSummary {
    fn fields(&self) -> Option<Fields<'_>> {
        if !self.is_map {
            return None;
        }
        Some(Fields {
            api_version: self.api_version.view(),
            kind: self.kind.view(),
            metadata: match &self.metadata {
                None => Metadata::Missing,
                Some(meta) if meta.is_map => Metadata::Mapping {
                    name: meta.name.view(),
                    namespace: meta.namespace.view(),
                },
                Some(meta) if meta.null => Metadata::Null,
                Some(_) => Metadata::Other,
            },
            items: match (&self.items, self.items_other) {
                (_, true) => ItemsShape::Other,
                (Some(_), false) => ItemsShape::Sequence,
                (None, false) => ItemsShape::Absent,
            },
        })
    }

    fn into_items(self) -> Vec<Self> {
        self.items.unwrap_or_default()
    }
}

/// Walks any value the way `serde_json::Value` would, keeping nothing.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

/// The visits every walker answers alike: any scalar gives `$other`, null gives `$null`, and an
/// `Option` or newtype wrapper is looked through.
macro_rules! any_value {
    ($de:lifetime, $ty:ty, other = $other:expr, null = $null:expr) => {
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i128<E: de::Error>(self, _: i128) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u128<E: de::Error>(self, _: u128) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($null)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($null)
        }
        fn visit_some<D: Deserializer<$de>>(self, d: D) -> Result<Self::Value, D::Error> {
            <$ty>::deserialize(d)
        }
        fn visit_newtype_struct<D: Deserializer<$de>>(self, d: D) -> Result<Self::Value, D::Error> {
            <$ty>::deserialize(d)
        }
    };
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<Skip>()?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_key::<Key>()?.is_some() {
        map.next_value::<Skip>()?;
    }
    Ok(())
}

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    any_value!('de, Skip, other = Skip, null = Skip);
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Skip, A::Error> {
        skip_seq(seq).map(|_| Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
        skip_map(map).map(|_| Skip)
    }
}

/// A mapping key, which must be a string (as for `serde_json::Value`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for StrField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrField;
            any_value!('de, StrField, other = StrField::Other, null = StrField::Null);
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrField, E> {
                Ok(StrField::Str(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<StrField, E> {
                Ok(StrField::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<StrField, A::Error> {
                skip_seq(seq).map(|_| StrField::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrField, A::Error> {
                skip_map(map).map(|_| StrField::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for MetaSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaSummary;
            any_value!('de, MetaSummary, other = MetaSummary::default(), null = MetaSummary {
                null: true,
                ..Default::default()
            });
            fn visit_str<E: de::Error>(self, _: &str) -> Result<MetaSummary, E> {
                Ok(MetaSummary::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MetaSummary, A::Error> {
                skip_seq(seq).map(|_| MetaSummary::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaSummary, A::Error> {
                let mut meta = MetaSummary {
                    is_map: true,
                    ..Default::default()
                };
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_str() {
                        "name" => meta.name = map.next_value()?,
                        "namespace" => meta.namespace = map.next_value()?,
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(meta)
            }
        }
        d.deserialize_any(V)
    }
}

/// `items`: a sequence of documents, or anything else (ignored unless the document is a List).
enum Items {
    Seq(Vec<DocSummary>),
    Null,
    Other,
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Items;
            any_value!('de, Items, other = Items::Other, null = Items::Null);
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Items, E> {
                Ok(Items::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<DocSummary>()? {
                    items.push(item);
                }
                Ok(Items::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items, A::Error> {
                skip_map(map).map(|_| Items::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DocSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DocSummary;
            any_value!('de, DocSummary, other = DocSummary::default(), null = DocSummary::default());
            fn visit_str<E: de::Error>(self, _: &str) -> Result<DocSummary, E> {
                Ok(DocSummary::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<DocSummary, A::Error> {
                skip_seq(seq).map(|_| DocSummary::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DocSummary, A::Error> {
                let mut doc = DocSummary {
                    is_map: true,
                    ..Default::default()
                };
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_str() {
                        "apiVersion" => doc.api_version = map.next_value()?,
                        "kind" => doc.kind = map.next_value()?,
                        "metadata" => doc.metadata = Some(map.next_value()?),
                        "items" => match map.next_value::<Items>()? {
                            Items::Seq(items) => doc.items = Some(items),
                            Items::Null => {}
                            Items::Other => doc.items_other = true,
                        },
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_any(V)
    }
}
