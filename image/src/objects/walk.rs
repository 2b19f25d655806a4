//! A walk over a document that keeps only what identifies an object and what the rules check
//! (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace`, the labels, the annotations'
//! keys, the `spec` fields that decide a CRD's or an APIService's name, and a list's `items`),
//! so that validation holds little more than those fields in memory. It refuses exactly what `serde_json::Value`
//! refuses (non-string keys), so that the full parse later accepts what validation accepted.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::fields::{Field, Fields, ItemsShape, Metadata, Spec, StrMap};
use super::rules::Document;

#[derive(Debug, Default)]
enum StrField {
    #[default]
    Missing,
    Null,
    Str(String),
    Other,
}

/// A value of which only the kind is kept (a string's text is not).
#[derive(Debug, Default)]
struct KindOnly(StrField);

/// A mapping of strings (labels, annotations) as found.
#[derive(Debug, Default)]
enum MapSummary<V> {
    #[default]
    Absent,
    Entries(Vec<(String, V)>),
    Other,
}

#[derive(Debug, Default)]
struct MetaSummary {
    is_map: bool,
    null: bool,
    name: StrField,
    namespace: StrField,
    labels: MapSummary<StrField>,
    annotations: MapSummary<KindOnly>,
}

/// `spec.group`, `spec.version` and `spec.names.plural`.
#[derive(Debug, Default)]
struct SpecSummary {
    group: StrField,
    version: StrField,
    plural: StrField,
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
    spec: SpecSummary,
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

impl MapSummary<StrField> {
    fn view(&self) -> StrMap<'_> {
        self.view_with(|v| v.view())
    }
}

impl<V> MapSummary<V> {
    fn view_with<'a>(&'a self, view: impl Fn(&'a V) -> Field<'a>) -> StrMap<'a> {
        match self {
            MapSummary::Absent => StrMap::Absent,
            MapSummary::Entries(entries) => {
                StrMap::Entries(entries.iter().map(|(k, v)| (k.as_str(), view(v))).collect())
            }
            MapSummary::Other => StrMap::Other,
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
                    labels: meta.labels.view(),
                    annotations: meta.annotations.view_with(|v| v.0.view()),
                },
                Some(meta) if meta.null => Metadata::Null,
                Some(_) => Metadata::Other,
            },
            items: match (&self.items, self.items_other) {
                (_, true) => ItemsShape::Other,
                (Some(_), false) => ItemsShape::Sequence,
                (None, false) => ItemsShape::Absent,
            },
            spec: Spec {
                group: self.spec.group.view(),
                version: self.spec.version.view(),
                plural: self.spec.plural.view(),
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

impl<'de> Deserialize<'de> for KindOnly {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KindOnly;
            any_value!('de, KindOnly, other = KindOnly(StrField::Other), null = KindOnly(StrField::Null));
            fn visit_str<E: de::Error>(self, _: &str) -> Result<KindOnly, E> {
                Ok(KindOnly(StrField::Str(String::new())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<KindOnly, A::Error> {
                skip_seq(seq).map(|_| KindOnly(StrField::Other))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KindOnly, A::Error> {
                skip_map(map).map(|_| KindOnly(StrField::Other))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapSummary<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MapSummary<T>;
            any_value!('de, MapSummary<T>, other = MapSummary::Other, null = MapSummary::Absent);
            fn visit_str<E: de::Error>(self, _: &str) -> Result<MapSummary<T>, E> {
                Ok(MapSummary::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MapSummary<T>, A::Error> {
                skip_seq(seq).map(|_| MapSummary::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MapSummary<T>, A::Error> {
                let mut entries = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(MapSummary::Entries(entries))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Visits a mapping, handing each key and its value to `field`, starting from `start`; null
/// gives `null`, anything else `T`'s default (`start` and `null` are the default unless given).
macro_rules! mapping_walker {
    ($ty:ty, |$value:ident, $key:ident, $map:ident| $body:block) => {
        mapping_walker!($ty, null = <$ty>::default(), start = <$ty>::default(), |$value, $key, $map| $body);
    };
    ($ty:ty, null = $null:expr, start = $start:expr, |$value:ident, $key:ident, $map:ident| $body:block) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty;
                    any_value!('de, $ty, other = <$ty>::default(), null = $null);
                    fn visit_str<E: de::Error>(self, _: &str) -> Result<$ty, E> {
                        Ok(<$ty>::default())
                    }
                    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<$ty, A::Error> {
                        skip_seq(seq).map(|_| <$ty>::default())
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> Result<$ty, A::Error> {
                        let mut $value = $start;
                        while let Some(Key($key)) = $map.next_key::<Key>()? $body
                        Ok($value)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

/// `spec.names`, of which only `plural` is kept.
#[derive(Default)]
struct Names(StrField);

mapping_walker!(Names, |names, key, map| {
    if key == "plural" {
        names.0 = map.next_value()?;
    } else {
        map.next_value::<Skip>()?;
    }
});

mapping_walker!(SpecSummary, |spec, key, map| {
    match key.as_str() {
        "group" => spec.group = map.next_value()?,
        "version" => spec.version = map.next_value()?,
        "names" => spec.plural = map.next_value::<Names>()?.0,
        _ => {
            map.next_value::<Skip>()?;
        }
    }
});

mapping_walker!(
    MetaSummary,
    null = MetaSummary {
        null: true,
        ..Default::default()
    },
    start = MetaSummary {
        is_map: true,
        ..Default::default()
    },
    |meta, key, map| {
        match key.as_str() {
            "name" => meta.name = map.next_value()?,
            "namespace" => meta.namespace = map.next_value()?,
            "labels" => meta.labels = map.next_value()?,
            "annotations" => meta.annotations = map.next_value()?,
            _ => {
                map.next_value::<Skip>()?;
            }
        }
    }
);

/// `items`: a sequence of documents, or anything else (ignored unless the document is a list).
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

mapping_walker!(
    DocSummary,
    null = DocSummary::default(),
    start = DocSummary {
        is_map: true,
        ..Default::default()
    },
    |doc, key, map| {
        match key.as_str() {
            "apiVersion" => doc.api_version = map.next_value()?,
            "kind" => doc.kind = map.next_value()?,
            "metadata" => doc.metadata = Some(map.next_value()?),
            "spec" => doc.spec = map.next_value()?,
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
);
