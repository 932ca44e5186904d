//! Fields that k8s-openapi types differently from one Kubernetes version
//! to the next, read and written the same way whichever version the
//! application picks (the library picks none).

/// A list field that is a `Vec` in some Kubernetes versions and an
/// `Option<Vec>` in others (`EndpointSlice.endpoints`, optional from
/// k8s-openapi's `v1_36` on).
pub trait ListField<T>: Sized {
    /// The items (none when the field is absent).
    fn items(&self) -> &[T];

    /// The field holding `items` (`None`: absent, or empty where the field
    /// cannot be absent).
    fn of(items: Option<Vec<T>>) -> Self;

    /// The items, to add to (an absent field becomes an empty list).
    fn items_mut(&mut self) -> &mut Vec<T>;

    /// Takes the items out, leaving none.
    fn take_items(&mut self) -> Vec<T> {
        std::mem::take(self.items_mut())
    }
}

impl<T> ListField<T> for Vec<T> {
    fn items(&self) -> &[T] {
        self
    }

    fn of(items: Option<Vec<T>>) -> Self {
        items.unwrap_or_default()
    }

    fn items_mut(&mut self) -> &mut Vec<T> {
        self
    }
}

impl<T> ListField<T> for Option<Vec<T>> {
    fn items(&self) -> &[T] {
        self.as_deref().unwrap_or_default()
    }

    fn of(items: Option<Vec<T>>) -> Self {
        items
    }

    fn items_mut(&mut self) -> &mut Vec<T> {
        self.get_or_insert_with(Vec::new)
    }
}
